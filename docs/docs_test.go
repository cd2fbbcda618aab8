package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/ringgate/ringgate/config"
)

// maxWords bounds README.md and docs/**/*.md together, the generated
// bench report aside: the docs must read in minutes.
const maxWords = 12000

// root is the repository's root, seen from this package.
const root = ".."

// pages are README.md and every docs/**/*.md but the bench report, as
// paths from root.
func pages(t *testing.T, root string) []string {
	t.Helper()
	out := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if filepath.ToSlash(rel) != "docs/bench/report.md" {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// words counts as wc -w does: runs of bytes between ASCII white space.
func words(s string) int {
	return len(strings.FieldsFunc(s, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
	}))
}

func TestWordCount(t *testing.T) {
	total := 0
	for _, p := range pages(t, root) {
		n := words(read(t, filepath.Join(root, p)))
		t.Logf("%5d %s", n, p)
		total += n
	}
	t.Logf("%5d in all", total)
	if total > maxWords {
		t.Errorf("README.md and docs/ hold %d words, more than %d: shorten them", total, maxWords)
	}
}

// TestEveryConfigKeyDocumented: each key the config accepts has a row in
// its table's section of docs/config.md.
func TestEveryConfigKeyDocumented(t *testing.T) {
	for _, k := range undocumentedKeys(read(t, filepath.Join(root, "docs", "config.md")), config.Keys()) {
		t.Errorf("config key %s is not in docs/config.md: give it a row under its table's heading", k)
	}
}

// undocumentedKeys returns the keys without a "| `key` |" row in the
// section whose heading names their table, as "## [node]" or
// "### [[tenants.model_limits]]" do.
func undocumentedKeys(doc string, keys []string) []string {
	rows := map[string]map[string]bool{}
	table := ""
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "#") {
			table = ""
			if i, j := strings.Index(line, "["), strings.LastIndex(line, "]"); i >= 0 && j > i {
				table = strings.Trim(line[i:j+1], "[]")
			}
			continue
		}
		if table != "" && strings.HasPrefix(line, "| `") {
			if rows[table] == nil {
				rows[table] = map[string]bool{}
			}
			key, _, _ := strings.Cut(line[3:], "`")
			rows[table][key] = true
		}
	}
	var missing []string
	for _, k := range keys {
		i := strings.LastIndex(k, ".")
		if !rows[k[:i]][k[i+1:]] {
			missing = append(missing, k)
		}
	}
	return missing
}

func TestLinksResolve(t *testing.T) {
	for _, e := range brokenLinks(t, root, pages(t, root)) {
		t.Error(e)
	}
}

var (
	fence    = regexp.MustCompile("(?ms)^```.*?^```")
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// prose is a page without its code: fenced and indented blocks and code
// spans, where a bracket is not a link.
func prose(s string) string {
	s = fence.ReplaceAllString(s, "")
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "\t") {
			b.WriteString(codeSpan.ReplaceAllString(line, "") + "\n")
		}
	}
	return b.String()
}

// brokenLinks checks every relative link of the pages: its file exists
// and its #anchor is a heading there.
func brokenLinks(t *testing.T, root string, pages []string) []string {
	t.Helper()
	var bad []string
	for _, p := range pages {
		for _, m := range link.FindAllStringSubmatch(prose(read(t, filepath.Join(root, p))), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := p
			if file != "" {
				dest = filepath.Join(filepath.Dir(p), file)
			}
			if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
				bad = append(bad, p+": link to "+target+": no file "+dest)
				continue
			}
			if anchor != "" && !anchors(read(t, filepath.Join(root, dest)))[anchor] {
				bad = append(bad, p+": link to "+target+": no heading "+anchor+" in "+dest)
			}
		}
	}
	return bad
}

// anchors are the heading anchors GitHub makes for a page: the heading
// in lower case, spaces as '-', punctuation but '-' and '_' dropped, a
// repeated one suffixed -1, -2, ...
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(fence.ReplaceAllString(page, ""), "\n") {
		h := strings.TrimLeft(line, "#")
		if len(h) == len(line) || len(line)-len(h) > 6 || !strings.HasPrefix(h, " ") {
			continue
		}
		s := slug(strings.TrimSpace(h))
		if n := seen[s]; n > 0 {
			out[s+"-"+itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestPackageMap: docs/design.md's package map has a row for every
// package of the module.
func TestPackageMap(t *testing.T) {
	design := read(t, filepath.Join(root, "docs", "design.md"))
	for _, pkg := range packages(t, root) {
		if !strings.Contains(design, "| `"+pkg+"`") && !strings.Contains(design, ", `"+pkg+"` |") {
			t.Errorf("package %s has no row in docs/design.md's package map", pkg)
		}
	}
}

// packages are the module's package directories, the root named
// ringgate.
func packages(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if e.IsDir() && p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(p))
		if dir = filepath.ToSlash(dir); dir == "." {
			dir = "ringgate"
		}
		if !seen[dir] {
			seen[dir] = true
			out = append(out, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChecksCatchBreakage: each check finds what it is for on pages
// broken on purpose.
func TestChecksCatchBreakage(t *testing.T) {
	if n := words("a  b\tc\n`d` e\u00a0f"); n != 5 {
		t.Errorf("words = %d, want 5, as wc -w counts", n)
	}
	doc := "## [node]\n\n| `listen` | x |\n\n### [[tenants.model_limits]]\n\n| `rpm` | x |\n\n## [limits]\n\nThe `window` is prose, not a row.\n"
	got := undocumentedKeys(doc, []string{"node.listen", "node.name", "tenants.model_limits.rpm", "tenants.rpm", "limits.window"})
	if strings.Join(got, " ") != "node.name tenants.rpm limits.window" {
		t.Errorf("undocumented = %v, want node.name tenants.rpm limits.window", got)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# R\n\n[ok](docs/a.md#get-tenantsname) [gone](docs/gone.md) [anchor](docs/a.md#nowhere) [self](#r) [web](https://x.example/y)\n\n    [code](docs/gone.md)\n")
	write("docs/a.md", "# A\n\n## GET /tenants/{name}\n\n[up](../README.md#r) [dup](#a-1)\n\n## A\n")
	bad := brokenLinks(t, dir, pages(t, dir))
	want := []string{"README.md: link to docs/gone.md: no file docs/gone.md", "README.md: link to docs/a.md#nowhere: no heading nowhere in docs/a.md"}
	if strings.Join(bad, "\n") != strings.Join(want, "\n") {
		t.Errorf("broken links:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
