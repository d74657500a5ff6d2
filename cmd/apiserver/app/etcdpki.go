package app

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/pkg/apiserver"
)

// etcdHosts are the names of the etcd of artifacts/deploy/etcd.yaml.
var etcdHosts = []string{
	"kiln-etcd", "kiln-etcd.kiln-system", "kiln-etcd.kiln-system.svc", "kiln-etcd.kiln-system.svc.cluster.local",
	"kiln-etcd-0.kiln-etcd.kiln-system.svc", "kiln-etcd-0.kiln-etcd.kiln-system.svc.cluster.local",
	"localhost", "127.0.0.1",
}

func newEtcdPKICommand(out io.Writer) *cobra.Command {
	dir, hosts := "etcd-pki", etcdHosts
	cmd := &cobra.Command{
		Use:   "etcd-pki",
		Short: "Write the certificates of an etcd that only kiln-apiserver may use",
		Long: `etcd-pki writes a new CA, etcd's serving certificate and kiln-apiserver's
client certificate, laid out as the two Secrets artifacts/deploy mounts:
DIR/server for the etcd StatefulSet, DIR/client for the API server. etcd
then refuses every client without that client certificate.`,
		Example: `  kiln-apiserver etcd-pki --dir etcd-pki
  kubectl -n kiln-system create secret generic kiln-etcd-server --from-file=etcd-pki/server
  kubectl -n kiln-system create secret generic kiln-etcd-client --from-file=etcd-pki/client`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
				return fmt.Errorf("%s is not empty; remove it or pick another --dir, so a credential in use is never overwritten", dir)
			}
			if _, err := apiserver.WriteEtcdPKI(dir, hosts); err != nil {
				return err
			}
			fmt.Fprintf(out, "Wrote %s. Create the Secrets (keep %s private, or delete it):\n", dir, dir)
			for _, s := range []string{"server", "client"} {
				fmt.Fprintf(out, "  kubectl -n kiln-system create secret generic kiln-etcd-%s --from-file=%s\n", s, filepath.Join(dir, s))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", dir, "directory to write the credential to; must be empty or absent")
	cmd.Flags().StringSliceVar(&hosts, "host", hosts, "DNS names and IP addresses etcd's serving certificate is valid for")
	return cmd
}
