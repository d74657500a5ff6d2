package localcluster

import "strconv"

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
