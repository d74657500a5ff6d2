package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
	return []struct {
		name string
		port *int
	}{
		{"etcd", &p.etcdClient}, {"etcd-peer", &p.etcdPeer}, {"kube-apiserver", &p.apiserver},
		{"kube-controller-manager", &p.controllerManager}, {"kube-scheduler", &p.scheduler},
		{"kiln-apiserver", &p.kiln}, {"kiln-controller", &p.controller},
		{"kiln-controller-metrics", &p.controllerMetrics}, {"kwok", &p.kwok},
	}
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
			return nil
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
	c.ports, err = freePorts()
	return err
}
