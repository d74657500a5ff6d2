package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// ErrCannotResume is wrapped by Start's error when Options.Resume is set
// and the directory holds no cluster this launcher can resume; starting
// without Resume discards it.
var ErrCannotResume = errors.New("cannot resume the local cluster")

// stateFile records what a resumed start must reuse. It is written once a
// new cluster has come up, so a directory without it holds none this
// launcher completed: one left by an older launcher, or a start that failed.
const stateFile = "cluster.json"

// stateVersion changes when a resumed start would read the directory
// differently.
const stateVersion = 1

type savedState struct {
	Version int `json:"version"`
	// Ports are kept, not chosen anew: etcd's membership holds its peer
	// URL and kwok wrote its own port into every Node's kubelet endpoint.
	Ports map[string]int `json:"ports"`
}

// named lists each port with the component that listens on it.
func (p *ports) named() []struct {
	name string
	port *int
} {
	named := []struct {
		name string
		port *int
	}{
		{"etcd", &p.etcdClient}, {"etcd-peer", &p.etcdPeer}, {"kube-apiserver", &p.apiserver},
		{"kube-controller-manager", &p.controllerManager}, {"kube-scheduler", &p.scheduler},
		{"kiln-apiserver", &p.kiln}, {"kiln-controller", &p.controller},
		{"kiln-controller-metrics", &p.controllerMetrics}, {"kwok", &p.kwok},
	}
	for i := range p.etcdMembers {
		name := etcdName(i + 1)
		named = append(named, []struct {
			name string
			port *int
		}{{name, &p.etcdMembers[i].client}, {name + "-peer", &p.etcdMembers[i].peer}}...)
	}
	return named
}

func (c *Cluster) statePath() string { return filepath.Join(c.Dir, stateFile) }

func (c *Cluster) saveState() error {
	st := savedState{Version: stateVersion, Ports: map[string]int{}}
	for _, n := range c.ports.named() {
		st.Ports[n.name] = *n.port
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := c.statePath() + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, c.statePath())
}

// loadState reads the ports of the cluster in Dir and checks that they are
// still free.
func (c *Cluster) loadState() error {
	data, err := os.ReadFile(c.statePath())
	if err != nil {
		return err
	}
	var st savedState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("%s: %w", c.statePath(), err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("%s is of version %d, this launcher reads version %d", c.statePath(), st.Version, stateVersion)
	}
	// Members are in each other's data dirs: a resume runs the same set.
	saved := 1
	for st.Ports[etcdName(saved)] > 0 {
		saved++
	}
	if want := c.opts.etcdMembers(); saved != want {
		return fmt.Errorf("it was started with %d etcd member(s), not %d, and resumes only with as many", saved, want)
	}
	c.ports.etcdMembers = make([]memberPorts, saved-1)
	for _, n := range c.ports.named() {
		port, ok := st.Ports[n.name]
		if !ok || port <= 0 {
			return fmt.Errorf("%s has no port for %s", c.statePath(), n.name)
		}
		*n.port = port
	}
	for _, n := range c.ports.named() {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*n.port))
		if err != nil {
			return fmt.Errorf("port %d, where this cluster's %s listens, is taken by another process: stop that process and start again", *n.port, n.name)
		}
		l.Close()
	}
	return nil
}

// prepareDir empties Dir for a new cluster or, with Resume, reads the state
// of the one there. A Resume on a missing or empty Dir starts a new one.
func (c *Cluster) prepareDir() error {
	if c.opts.Resume {
		err := c.loadState()
		if err == nil {
			c.Resumed = true
			return c.replicaPorts()
		}
		entries, rerr := os.ReadDir(c.Dir)
		if !errors.Is(err, os.ErrNotExist) || (rerr == nil && len(entries) > 0) {
			if errors.Is(err, os.ErrNotExist) {
				err = errors.New("it holds no " + stateFile + ": an older launcher left it, or a start that did not finish")
			}
			return fmt.Errorf("%w in %s: %v", ErrCannotResume, c.Dir, err)
		}
	} else if err := os.RemoveAll(c.Dir); err != nil {
		return err
	}
	var err error
	c.ports, err = newPorts(c.opts.etcdMembers(), c.opts.kilnReplicas())
	return err
}

// replicaPorts picks the ports of the Kiln replicas of a resumed cluster.
// They are not saved: nothing stores them, and the number of replicas
// may differ from the last start.
func (c *Cluster) replicaPorts() error {
	if c.opts.kilnReplicas() == 1 {
		return nil
	}
	var taken []int
	for _, n := range c.ports.named() {
		taken = append(taken, *n.port)
	}
	var err error
	c.ports.kilnReplicas, err = freePorts(c.opts.kilnReplicas(), taken...)
	return err
}

// newPorts picks free ports for every component of a new cluster.
func newPorts(etcdMembers, kilnReplicas int) (ports, error) {
	ps, err := freePorts(9 + 2*(etcdMembers-1))
	if err != nil {
		return ports{}, err
	}
	p := ports{etcdClient: ps[0], etcdPeer: ps[1], apiserver: ps[2], controllerManager: ps[3], scheduler: ps[4], kiln: ps[5], controller: ps[6], kwok: ps[7], controllerMetrics: ps[8]}
	for i := 9; i < len(ps); i += 2 {
		p.etcdMembers = append(p.etcdMembers, memberPorts{client: ps[i], peer: ps[i+1]})
	}
	if kilnReplicas > 1 {
		p.kilnReplicas, err = freePorts(kilnReplicas, ps...)
	}
	return p, err
}

// freePorts picks n ports free on 127.0.0.1 and not among taken, which
// may be free now but belong to a component not yet started.
func freePorts(n int, taken ...int) ([]int, error) {
	var ps []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	// Listeners held open until the end keep the picks apart.
	for len(ps) < n {
		if len(ls) > n+len(taken) {
			return nil, fmt.Errorf("no %d free ports on 127.0.0.1 apart from %v", n, taken)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		if port := l.Addr().(*net.TCPAddr).Port; !slices.Contains(taken, port) {
			ps = append(ps, port)
		}
	}
	return ps, nil
}
