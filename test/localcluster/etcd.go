package localcluster

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
)

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

// EtcdURL is the client URL of etcd's first member.
func (c *Cluster) EtcdURL() string { return c.etcdURL() }

func (c *Cluster) etcdURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.ports.etcdClient) }
