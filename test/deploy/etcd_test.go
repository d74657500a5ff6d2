// Package deploy tests the manifests of artifacts/deploy against the real
// binaries they run, as far as that is possible without a cluster.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"kiln.dev/kiln/pkg/apiserver"
	"kiln.dev/kiln/pkg/apiserver/testserver"
)

var root = filepath.Join("..", "..")

// TestEtcdTakesOnlyKilnsClientCertificate (issue G, class 7): the etcd
// StatefulSet of artifacts/deploy, run with its own command line by the
// etcd binary the local cluster uses, with the Secrets `kiln-apiserver
// etcd-pki` writes at its mount paths, refuses plain HTTP, TLS without a
// client certificate and a certificate of another CA; and the API
// server's Deployment reaches it with the files of its kiln-etcd-client
// Secret.
func TestEtcdTakesOnlyKilnsClientCertificate(t *testing.T) {
	etcdBin := filepath.Join(root, "_output", "bin", "etcd")
	if _, err := os.Stat(etcdBin); err != nil {
		t.Fatalf("%v: build it with `make control-plane`", err)
	}
	etcdSet := decode[appsv1.StatefulSet](t, "etcd.yaml", "StatefulSet")
	kiln := decode[appsv1.Deployment](t, "apiserver.yaml", "Deployment")

	dir := t.TempDir()
	if _, err := apiserver.WriteEtcdPKI(filepath.Join(dir, "pki"), []string{"localhost", "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	// Each Secret's mount path in a Pod is, here, the directory the
	// command wrote it to.
	etcdPod := etcdSet.Spec.Template.Spec
	paths := mountedSecrets(t, etcdPod, "etcd", map[string]string{"kiln-etcd-server": filepath.Join(dir, "pki", "server")})
	for _, m := range etcdPod.Containers[0].VolumeMounts {
		if m.Name == "data" {
			paths[m.MountPath] = filepath.Join(dir, "data")
		}
	}
	client, peer := freePort(t), freePort(t)
	var args []string
	for _, a := range etcdPod.Containers[0].Command[1:] {
		for from, to := range paths {
			a = strings.Replace(a, "="+from, "="+to, 1)
		}
		a = strings.Replace(a, "0.0.0.0:2379", client, 1)
		a = strings.Replace(a, "kiln-etcd.kiln-system.svc:2379", client, 1)
		args = append(args, a)
	}
	// Only the ports are the test's: a member of its own on loopback.
	args = append(args, "--listen-peer-urls=http://"+peer, "--initial-advertise-peer-urls=http://"+peer,
		"--initial-cluster=default=http://"+peer, "--name=default")
	if !strings.Contains(strings.Join(args, " "), "--listen-client-urls=https://"+client) {
		t.Fatalf("etcd's client listener is not https on 0.0.0.0:2379: %v", etcdPod.Containers[0].Command)
	}
	run(t, exec.Command(etcdBin, args...))

	// The API server's files, as its Deployment names them.
	kilnPod := kiln.Spec.Template.Spec
	kilnPaths := mountedSecrets(t, kilnPod, "apiserver", map[string]string{"kiln-etcd-client": filepath.Join(dir, "pki", "client")})
	flags := map[string]string{}
	for _, a := range kilnPod.Containers[0].Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			for from, to := range kilnPaths {
				if strings.HasPrefix(v, from+"/") {
					v = to + strings.TrimPrefix(v, from)
				}
			}
			flags[k] = v
		}
	}
	if s := flags["--etcd-servers"]; s != "https://kiln-etcd.kiln-system.svc:2379" {
		t.Errorf("kiln-apiserver --etcd-servers=%q, want the StatefulSet's Service over https", s)
	}
	kilnTLS, err := testserver.EtcdTLS(flags["--etcd-cafile"], flags["--etcd-certfile"], flags["--etcd-keyfile"])
	if err != nil {
		t.Fatalf("kiln-apiserver's etcd credential, from its Deployment's flags: %v", err)
	}
	testserver.CheckEtcdCredential(t, client, kilnTLS, 30*time.Second)
}

// decode reads the first object of kind from a manifest of artifacts/deploy.
func decode[T any](t *testing.T, file, kind string) *T {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "artifacts", "deploy", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			t.Fatalf("no %s in %s", kind, file)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(doc, []byte("kind: "+kind+"\n")) {
			continue
		}
		var obj T
		if err := utilyaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s in %s: %v", kind, file, err)
		}
		return &obj
	}
}

// mountedSecrets maps the mount path of each Secret named in local, in
// the container, to its local directory; every one must be mounted.
func mountedSecrets(t *testing.T, pod corev1.PodSpec, container string, local map[string]string) map[string]string {
	t.Helper()
	volumes := map[string]string{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			volumes[v.Name] = v.Secret.SecretName
		}
	}
	out := map[string]string{}
	for _, c := range pod.Containers {
		if c.Name != container {
			continue
		}
		for _, m := range c.VolumeMounts {
			if dir, ok := local[volumes[m.Name]]; ok {
				out[m.MountPath] = dir
			}
		}
	}
	if len(out) != len(local) {
		t.Fatalf("container %s mounts %v of the Secrets %v", container, out, local)
	}
	return out
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// run starts cmd until the test ends, and shows what it printed if the
// test fails.
func run(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%v:\n%s", cmd.Args, logs.String())
		}
	})
}
