package app

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/component-base/version"
	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/pkg/apiserver"
)

// servingHosts are the names the aggregator verifies kiln-apiserver's
// certificate for: its Service in artifacts/deploy/apiserver.yaml.
var servingHosts = []string{"kiln-apiserver.kiln-system.svc", "kiln-apiserver.kiln-system.svc.cluster.local"}

func newServingCertCommand(out io.Writer) *cobra.Command {
	dir, base, registry, hosts, etcd := "kiln-install", "artifacts", "", servingHosts, etcdHosts
	cmd := &cobra.Command{
		Use:   "serving-cert",
		Short: "Write the credentials of an install and a kustomization that applies them",
		Long: `serving-cert writes what an install of Kiln needs besides its manifests,
and a kustomization that installs Kiln with it:

  DIR/serving-cert      a new CA and kiln-apiserver's serving certificate
  DIR/etcd-pki          etcd's credential, as etcd-pki writes it
  DIR/kustomization.yaml
                        --base, the Secrets kiln-apiserver-tls,
                        kiln-etcd-server and kiln-etcd-client made from
                        those files, and the APIService's caBundle set to
                        the serving certificate's CA; with --registry,
                        the images of this build there

Then "kubectl apply -k DIR" installs or updates Kiln. The Secrets' names
carry a hash of their contents, so new credentials roll the Pods that
mount them. Keep DIR private: it holds etcd's client key.`,
		Example: `  make images && make push REGISTRY=registry.example/kiln
  kiln-apiserver serving-cert --dir kiln-install --base artifacts --registry registry.example/kiln
  kubectl apply -k kiln-install`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
				return fmt.Errorf("%s is not empty; remove it or pick another --dir, so a credential in use is never overwritten", dir)
			}
			if err := writeInstall(dir, base, registry, hosts, etcd); err != nil {
				return err
			}
			fmt.Fprintf(out, "Wrote %s. Install Kiln with (keep %s private):\n  kubectl apply -k %s\n", dir, dir, dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", dir, "directory to write the credentials and the kustomization to; must be empty or absent")
	cmd.Flags().StringVar(&base, "base", base, "the kustomization to install: a directory (artifacts/ of Kiln's source, or an overlay of it) or a remote kustomize URL")
	cmd.Flags().StringVar(&registry, "registry", registry, "where `make push` put Kiln's images: the kustomization names them there, tagged with this binary's version (etcd keeps the base's tag)")
	cmd.Flags().StringSliceVar(&hosts, "host", hosts, "DNS names and IP addresses kiln-apiserver's serving certificate is valid for")
	cmd.Flags().StringSliceVar(&etcd, "etcd-host", etcd, "DNS names and IP addresses etcd's serving certificate is valid for")
	return cmd
}

// writeInstall writes the credentials and the kustomization of an install
// to dir.
func writeInstall(dir, base, registry string, hosts, etcdHosts []string) error {
	// kustomize resolves a base relative to the kustomization; a base that
	// is not a local directory is taken as a URL.
	resource := base
	if st, err := os.Stat(base); err == nil && st.IsDir() {
		absBase, err := filepath.Abs(base)
		if err != nil {
			return err
		}
		absDir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		if resource, err = filepath.Rel(absDir, absBase); err != nil {
			return err
		}
	} else if !strings.Contains(base, "://") && !strings.Contains(base, "?ref=") {
		return fmt.Errorf("--base %s: %w", base, os.ErrNotExist)
	}
	serving, err := apiserver.WriteServingCert(filepath.Join(dir, "serving-cert"), hosts)
	if err != nil {
		return err
	}
	if _, err := apiserver.WriteEtcdPKI(filepath.Join(dir, "etcd-pki"), etcdHosts); err != nil {
		return err
	}
	ca, err := os.ReadFile(serving.CAFile)
	if err != nil {
		return err
	}
	secret := func(name, typ string, files ...string) map[string]any {
		s := map[string]any{"name": name, "namespace": "kiln-system", "files": files}
		if typ != "" {
			s["type"] = typ
		}
		return s
	}
	etcdFiles := func(side string) []string {
		var files []string
		for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
			files = append(files, f+"="+filepath.Join("etcd-pki", side, f))
		}
		return files
	}
	patch, err := yaml.Marshal([]map[string]any{{"op": "add", "path": "/spec/caBundle", "value": base64.StdEncoding.EncodeToString(ca)}})
	if err != nil {
		return err
	}
	kustomization := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{resource},
		"secretGenerator": []map[string]any{
			secret("kiln-apiserver-tls", "kubernetes.io/tls", "tls.crt=serving-cert/tls.crt", "tls.key=serving-cert/tls.key"),
			secret("kiln-etcd-server", "", etcdFiles("server")...),
			secret("kiln-etcd-client", "", etcdFiles("client")...),
		},
		"patches": []map[string]any{{
			"target": map[string]any{"group": "apiregistration.k8s.io", "kind": "APIService", "name": "v1alpha1.gpu.kiln.dev"},
			"patch":  string(patch),
		}},
	}
	if registry != "" {
		kustomization["images"] = images(registry, version.Get().GitVersion)
	}
	k, err := yaml.Marshal(kustomization)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteString("# Written by `kiln-apiserver serving-cert`; install with `kubectl apply -k` of\n# this directory. It holds etcd's client key: keep it private.\n")
	b.Write(k)
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b.Bytes(), 0o600)
}

// images is the kustomization's images field for Kiln's images under
// registry, as `make images` names them: the three of this build at tag,
// etcd at the base's tag.
func images(registry, tag string) []map[string]string {
	registry = strings.TrimSuffix(registry, "/")
	var images []map[string]string
	for _, name := range []string{"kiln-apiserver", "kiln-controller", "kiln-node-agent"} {
		images = append(images, map[string]string{"name": name, "newName": registry + "/" + name, "newTag": tag})
	}
	return append(images, map[string]string{"name": "etcd", "newName": registry + "/etcd"})
}
