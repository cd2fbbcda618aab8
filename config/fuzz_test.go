package config

import (
	"errors"
	"testing"
)

// FuzzParse checks that no input panics, that every failure is a located
// *Error, and that every success is a valid Config.
func FuzzParse(f *testing.F) {
	seeds := []string{
		Example,
		"",
		"[node]\nlisten = \"127.0.0.1:1\"\n",
		"[[tenants]]\nname = \"a\"\nkeys = [\"k\", \"sha256:00\"]\nrpm = -1\n",
		"tenants = [{name = \"a\", keys = [\"k\"]}, {name = \"b\", keys = [[1]]}]\n",
		"[[upstreams]]\nname = \"u\"\nbase_url = \"env:X\"\nmodels = [\"m\", \"m\"]\n",
		"[cluster]\nsecret = \"AAAA\"\n[limits]\nwindow = \"1h\"\nmax_body_bytes = 9223372036854775807\n",
		"a.b.c = 1\n[a]\n[[a.b]]\n",
		"[[t]]\n[t.x]\n[[t.x.y]]\n",
		"[[upstreams]]\nname = \"u\"\nbase_url = \"http://x\"\nmodels = [\"m\"]\non_redis_down = \"open\"\n[[upstreams.model_limits]]\nmodel = \"m\"\nrpm = 1\n",
		"[[upstreams]]\nname = \"u\"\nbase_url = \"http://x\"\nmodel_limits = [{model = \"m\"}, {model = \"m\", tpm = -1}]\n",
		"[node\n",
		"node = {listen = 1, join = [\"a\", {b = 2}]}\n",
		"\"quoted.key\" = 1\n'x' = [ ]\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	env := envMap(map[string]string{"X": "http://x"})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parse(data, "f.toml", env)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || ce.Msg == "" {
				t.Fatalf("error %v (%T) is not a located *Error", err, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid config: %v", err)
		}
		for _, tn := range c.Tenants {
			if _, err := tn.KeyHashes(); err != nil {
				t.Fatalf("accepted tenant with bad keys: %v", err)
			}
		}
	})
}
