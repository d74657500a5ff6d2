package localcluster

import (
	"context"
	"path/filepath"
	"strconv"
)

func (c *Cluster) startControllerManager(ctx context.Context) error {
	kc, err := c.componentKubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return err
	}
	err = c.start("kube-controller-manager",
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.controllerManager),
		// No pod CIDRs to hand out and no TTL annotations wanted; node
		// lifecycle stays on, since it lifts the not-ready taint of new Nodes.
		"--controllers=*,-nodeipam,-ttl",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+filepath.Join(c.pkiDir(), serviceAccountKeyFile),
		"--root-ca-file="+c.pki.ca.CertFile,
		"--cluster-signing-cert-file="+c.pki.ca.CertFile,
		"--cluster-signing-key-file="+filepath.Join(c.pkiDir(), "ca.key"),
		"--leader-elect=false",
	)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, insecureClient(), "https://127.0.0.1:"+strconv.Itoa(c.ports.controllerManager)+"/healthz")
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	kc, err := c.componentKubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	err = c.start("kube-scheduler", append([]string{
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(c.ports.scheduler),
		"--leader-elect=false",
	}, c.opts.SchedulerFlags...)...)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, insecureClient(), "https://127.0.0.1:"+strconv.Itoa(c.ports.scheduler)+"/healthz")
}
