package localcluster

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
)

func (o Options) etcdMembers() int  { return max(o.EtcdMembers, 1) }
func (o Options) kilnReplicas() int { return max(o.KilnReplicas, 1) }

// etcdName and kilnName are the process names of the i-th etcd member and
// Kiln replica: the first keeps the plain name tests and tools know.
func etcdName(i int) string { return numbered("etcd", i) }
func kilnName(i int) string { return numbered("kiln-apiserver", i) }

func numbered(name string, i int) string {
	if i == 0 {
		return name
	}
	return name + "-" + strconv.Itoa(i)
}

// members lists the client and peer ports of every etcd member.
func (p *ports) members() []memberPorts {
	return append([]memberPorts{{client: p.etcdClient, peer: p.etcdPeer}}, p.etcdMembers...)
}

// EtcdURLs are the client URLs of every etcd member, the first first.
func (c *Cluster) EtcdURLs() []string {
	var urls []string
	for _, m := range c.ports.members() {
		urls = append(urls, "http://127.0.0.1:"+strconv.Itoa(m.client))
	}
	return urls
}

// kilnPorts are where the Kiln replicas listen: KilnURL's port itself when
// only one runs.
func (c *Cluster) kilnPorts() []int {
	if len(c.ports.kilnReplicas) == 0 {
		return []int{c.ports.kiln}
	}
	return c.ports.kilnReplicas
}

// KilnReplicaURLs reach each Kiln replica directly, in the order of their
// names (kiln-apiserver, kiln-apiserver-1, ...); with one replica, that is
// KilnURL.
func (c *Cluster) KilnReplicaURLs() []string {
	var urls []string
	for _, p := range c.kilnPorts() {
		urls = append(urls, "https://127.0.0.1:"+strconv.Itoa(p))
	}
	return urls
}

// startEtcd starts every member at once, as none is healthy before a
// quorum is. A resumed member finds its cluster in its data dir and
// ignores the initial-cluster flags.
func (c *Cluster) startEtcd(ctx context.Context) error {
	members := c.ports.members()
	var initial []string
	for i, m := range members {
		initial = append(initial, memberName(i)+"=http://127.0.0.1:"+strconv.Itoa(m.peer))
	}
	urls := c.EtcdURLs()
	for i, m := range members {
		peer := "http://127.0.0.1:" + strconv.Itoa(m.peer)
		err := c.startBinary(etcdName(i), "etcd",
			"--name="+memberName(i),
			"--data-dir="+filepath.Join(c.Dir, etcdName(i)),
			"--listen-client-urls="+urls[i], "--advertise-client-urls="+urls[i],
			"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
			"--initial-cluster="+strings.Join(initial, ","),
			"--initial-cluster-state=new",
			"--log-level=warn",
		)
		if err != nil {
			return err
		}
	}
	for _, url := range urls {
		if err := c.waitHTTP(ctx, http.DefaultClient, url+"/health"); err != nil {
			return err
		}
	}
	return nil
}

// memberName is the etcd member's own name; the first is "local", as a
// single-member cluster's data dir records it.
func memberName(i int) string { return numbered("local", i) }

// startBalancer puts the balancer on KilnURL's port when several Kiln
// replicas run.
func (c *Cluster) startBalancer() error {
	if len(c.ports.kilnReplicas) == 0 {
		return nil
	}
	var backends []string
	for _, p := range c.ports.kilnReplicas {
		backends = append(backends, "127.0.0.1:"+strconv.Itoa(p))
	}
	b, err := startBalancer("127.0.0.1:"+strconv.Itoa(c.ports.kiln), backends)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.balancer = b
	c.mu.Unlock()
	return nil
}
