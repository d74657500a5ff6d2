package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

// startKwok runs kwok as the kubelet of every simulated node (one identity
// acting for many nodes, which the Node authorizer cannot express, hence
// system:masters) and creates the nodes.
func (c *Cluster) startKwok(ctx context.Context) error {
	kc, err := c.componentKubeconfig("kwok", "kwok-controller", "system:masters")
	if err != nil {
		return err
	}
	stagesFile, err := c.writeKwokStages()
	if err != nil {
		return err
	}
	serving, err := c.pki.ca.serving(c.pkiDir(), "kwok", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return err
	}
	err = c.start("kwok",
		"--kubeconfig="+kc,
		"--config="+stagesFile,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation+"="+simulatedNodeMarker,
		"--disregard-status-with-annotation-selector="+CustomStatusAnnotation+"=custom",
		"--cidr=10.244.0.1/16",
		// kwok's server is every node's kubelet endpoint (logs).
		"--node-ip=127.0.0.1",
		"--node-port="+strconv.Itoa(c.ports.kwok),
		"--server-address=127.0.0.1:"+strconv.Itoa(c.ports.kwok),
		"--tls-cert-file="+serving.CertFile, "--tls-private-key-file="+serving.KeyFile,
		"--node-lease-duration-seconds=40",
	)
	if err != nil {
		return err
	}
	background, stop := context.WithCancel(context.Background())
	c.stopBackground = stop
	go c.retryKwokDeletes(background)
	// A resumed cluster's Nodes are there already; kwok takes them over
	// by their annotation.
	for _, n := range c.opts.Nodes {
		if _, err := c.kube.CoreV1().Nodes().Create(ctx, n.Node(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	// Schedulable means Ready and without the not-ready taint the node
	// lifecycle controller lifts.
	// One list a poll. The taint goes with a node's status update after
	// it is Ready, a few hundred a minute at a thousand nodes.
	return c.poll(ctx, 90*time.Second+time.Duration(len(c.opts.Nodes))*400*time.Millisecond, func(ctx context.Context) (bool, error) {
		list, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := map[string]bool{}
		for i := range list.Items {
			ready[list.Items[i].Name] = NodeReady(&list.Items[i])
		}
		for _, n := range c.opts.Nodes {
			if !ready[n.Name] {
				return false, nil
			}
		}
		return true, nil
	})
}

// writeKwokStages writes kwok's configuration, its stages and the log every
// container shows, and returns the file.
func (c *Cluster) writeKwokStages() (string, error) {
	// The stages kwok ships: nodes turn Ready and renew their leases, Pods
	// go Running, complete, and are removed when deleted.
	stages := strings.Join([]string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}, "\n---\n")
	// Every container's log is this file, so a log read through Kiln has
	// something to show; follow streams what is appended to it. A resumed
	// cluster keeps what it had.
	if err := writeNewFile(c.ContainerLogFile(), []byte(criLogLine("container started"))); err != nil {
		return "", err
	}
	stages += fmt.Sprintf(`
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: every-container
spec:
  logs:
  - logsFile: %q
    follow: true
`, c.ContainerLogFile())
	stagesFile := filepath.Join(c.Dir, "kwok-stages.yaml")
	return stagesFile, os.WriteFile(stagesFile, []byte(stages), 0o644)
}
