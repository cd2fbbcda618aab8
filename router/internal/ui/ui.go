// Package ui holds the admin status page's files: its HTML, its style and
// its script, embedded in the binary (no CDN, no build step). The page
// holds no data; its script polls /ui/state with the admin token and
// draws what it gets.
//
// It owns the page's look and the script that draws it. It knows nothing
// of HTTP, access rules or the cluster: package admin serves its files and
// the JSON the script reads.
package ui

import (
	"embed"
)

//go:embed files
var files embed.FS

// byPath maps the page's paths to its files and their content types.
var byPath = map[string][2]string{
	"/ui":        {"files/index.html", "text/html; charset=utf-8"},
	"/ui/":       {"files/index.html", "text/html; charset=utf-8"},
	"/ui/app.js": {"files/app.js", "text/javascript; charset=utf-8"},
	"/ui/ui.css": {"files/ui.css", "text/css; charset=utf-8"},
}

// Asset is the page's file at path: its body and content type; ok is
// false for a path that is not one of them.
func Asset(path string) (body []byte, contentType string, ok bool) {
	f, ok := byPath[path]
	if !ok {
		return nil, "", false
	}
	body, err := files.ReadFile(f[0])
	if err != nil {
		return nil, "", false
	}
	return body, f[1], true
}
