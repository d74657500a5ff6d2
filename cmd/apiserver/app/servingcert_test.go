package app

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/component-base/version"
	"sigs.k8s.io/yaml"
)

func TestWriteInstall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "install")
	base := filepath.Join("..", "..", "..", "artifacts")
	if err := writeInstall(dir, base, "registry.example/kiln", servingHosts, etcdHosts); err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources       []string
		SecretGenerator []struct {
			Name, Namespace, Type string
			Files                 []string
		} `json:"secretGenerator"`
		Patches []struct{ Patch string }
		Images  []struct {
			Name, NewName, NewTag string
		} `json:"images"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	// kustomize resolves the base from the kustomization's directory.
	if len(k.Resources) != 1 || filepath.Join(dir, k.Resources[0]) != mustAbs(t, base) {
		t.Errorf("resources = %v, want the relative path to %s", k.Resources, base)
	}
	// Every file a Secret is made of is where the kustomization says.
	var names []string
	for _, s := range k.SecretGenerator {
		names = append(names, s.Name)
		if s.Namespace != "kiln-system" {
			t.Errorf("Secret %s in namespace %q", s.Name, s.Namespace)
		}
		for _, f := range s.Files {
			_, path, _ := strings.Cut(f, "=")
			if _, err := os.Stat(filepath.Join(dir, path)); err != nil {
				t.Errorf("Secret %s: %v", s.Name, err)
			}
		}
	}
	if got := strings.Join(names, ","); got != "kiln-apiserver-tls,kiln-etcd-server,kiln-etcd-client" {
		t.Errorf("Secrets = %s", got)
	}
	var images []string
	for _, i := range k.Images {
		images = append(images, i.Name+"="+i.NewName+":"+i.NewTag)
	}
	tag := version.Get().GitVersion
	if got, want := strings.Join(images, " "), "kiln-apiserver=registry.example/kiln/kiln-apiserver:"+tag+
		" kiln-controller=registry.example/kiln/kiln-controller:"+tag+" kiln-node-agent=registry.example/kiln/kiln-node-agent:"+tag+
		" etcd=registry.example/kiln/etcd:"; got != want {
		t.Errorf("images = %s, want %s", got, want)
	}
	// The caBundle verifies the serving certificate for the Service's name,
	// as the aggregator does.
	var ops []struct{ Path, Value string }
	if len(k.Patches) != 1 {
		t.Fatalf("patches = %v", k.Patches)
	}
	if err := yaml.Unmarshal([]byte(k.Patches[0].Patch), &ops); err != nil || len(ops) != 1 || ops[0].Path != "/spec/caBundle" {
		t.Fatalf("patch = %q (%v)", k.Patches[0].Patch, err)
	}
	ca, err := base64.StdEncoding.DecodeString(ops[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "serving-cert", "tls.crt"), filepath.Join(dir, "serving-cert", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	for _, host := range []string{"kiln-apiserver.kiln-system.svc", "kiln-apiserver.kiln-system.svc.cluster.local"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "kiln-etcd.kiln-system.svc", Roots: roots}); err == nil {
		t.Error("the serving certificate is valid for etcd's name too")
	}
	if st, err := os.Stat(filepath.Join(dir, "etcd-pki", "client", "tls.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("etcd's client key: %v, %v", st.Mode(), err)
	}
	// A second run would replace credentials in use.
	cmd := newServingCertCommand(&strings.Builder{})
	cmd.SetArgs([]string{"--dir", dir, "--base", base})
	cmd.SetOut(&strings.Builder{})
	cmd.SetErr(&strings.Builder{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("second run: %v, want a refusal", err)
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
