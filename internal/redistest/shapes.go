package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TLSFiles are a CA and a server certificate signed by it, for 127.0.0.1
// and "localhost", as PEM files.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// NewTLSFiles writes a fresh CA and server certificate into a temporary
// directory of tb.
func NewTLSFiles(tb testing.TB) *TLSFiles {
	tb.Helper()
	dir := tb.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis.test"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost", "redis.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	f := &TLSFiles{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem")}
	for path, block := range map[string]*pem.Block{
		f.CAFile:   {Type: "CERTIFICATE", Bytes: caDER},
		f.CertFile: {Type: "CERTIFICATE", Bytes: leafDER},
		f.KeyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return f
}

// Cluster is a Redis Cluster started by StartCluster or
// StartClusterWithReplicas.
type Cluster struct {
	Servers []*Server
}

// Addrs are the servers' addresses (masters first, as started).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr()
	}
	return out
}

// ByAddr is the server listening on addr, nil if none is.
func (c *Cluster) ByAddr(addr string) *Server {
	for _, s := range c.Servers {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// StartCluster starts n redis-servers in cluster mode, joins them into one
// cluster with the 16 384 slots spread over them (redis-cli --cluster
// create), and waits until every one says the cluster is ok.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	return StartClusterWithReplicas(tb, n, 0)
}

// StartClusterWithReplicas is StartCluster with replicas replicas for each
// of the masters masters (redis-cli picks which server is which), and waits
// until every replica's link to its master is up: a master that fails is
// then replaced by its replica (cluster-node-timeout 2 s).
func StartClusterWithReplicas(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redistest: redis-cli not found (Debian: apt-get install redis-tools): %v", err)
	}
	c := &Cluster{}
	for range masters * (1 + replicas) {
		c.Servers = append(c.Servers, StartWith(tb, Options{Args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}}))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, s := range c.Servers {
		for {
			info, _ := exec.Command(cli, "-p", strconv.Itoa(s.port), "cluster", "info").Output()
			repl, _ := exec.Command(cli, "-p", strconv.Itoa(s.port), "info", "replication").Output()
			ok := strings.Contains(string(info), "cluster_state:ok")
			if strings.Contains(string(repl), "role:slave") {
				ok = ok && strings.Contains(string(repl), "master_link_status:up")
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster not ok on %s:\n%s\n%s", s.Addr(), info, repl)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// StartSentinel starts a Sentinel watching master under name.
func StartSentinel(tb testing.TB, master *Server, name string) *Server {
	tb.Helper()
	return StartWith(tb, Options{Monitor: master.Addr(), MasterName: name})
}
