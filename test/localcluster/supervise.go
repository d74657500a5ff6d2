package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
)

const (
	// A component that ran this long before exiting is restarted at once;
	// one that keeps exiting sooner waits longer each time, up to
	// maxBackoff, so a broken one does not spin.
	stableRun      = time.Minute
	initialBackoff = time.Second
	maxBackoff     = 30 * time.Second
)

// Supervise keeps every component running until ctx ends: one that exits,
// whatever the reason, is logged with its exit status and the last line
// of its log, and started again with the same arguments after a backoff.
// The local cluster's state is on disk, so a restarted etcd, kube-apiserver
// or Kiln carries on where it was. Only the end of ctx (Ctrl-C, make down)
// stops supervising; Stop then ends the components.
func (c *Cluster) Supervise(ctx context.Context) {
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		c.mu.Lock()
		for i, p := range c.procs {
			if p.exited() == nil {
				continue
			}
			now := time.Now()
			if p.exitedAt.IsZero() {
				p.exitedAt = now
				ran := now.Sub(p.started)
				if ran >= stableRun {
					p.failures = 0
				} else {
					p.failures++
				}
				fmt.Fprintf(c.log, "supervisor: %s (PID %d) exited after %s: %v; last log line: %q; restarting in %s (log %s)\n",
					p.name, p.cmd.Process.Pid, ran.Round(time.Second), p.err, p.lastLogLine(), backoff(p.failures), p.logFile)
			}
			if now.Sub(p.exitedAt) < backoff(p.failures) {
				continue
			}
			n, err := p.restart()
			if err != nil {
				fmt.Fprintf(c.log, "supervisor: starting %s again: %v; trying again in %s\n", p.name, err, backoff(p.failures))
				p.exitedAt = now
				continue
			}
			c.procs[i] = n
			fmt.Fprintf(c.log, "supervisor: %s restarted as PID %d (restart %d)\n", n.name, n.cmd.Process.Pid, n.restarts)
		}
		c.mu.Unlock()
	}
}

// backoff is the wait before a restart after failures quick exits in a row:
// none after a component that had run a while.
func backoff(failures int) time.Duration {
	if failures == 0 {
		return 0
	}
	d := initialBackoff
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// Kill ends the component of that name with SIGKILL, as a crash or the OOM
// killer would, and returns once it is gone; Supervise starts it again.
// Only the PID the launcher holds is signalled.
func (c *Cluster) Kill(name string) (pid int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.find(name)
	if p == nil {
		return 0, fmt.Errorf("the launcher started no %s", name)
	}
	if err := p.exited(); err != nil {
		return 0, err
	}
	pid = p.cmd.Process.Pid
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return 0, fmt.Errorf("killing %s (PID %d): %w", name, pid, err)
	}
	<-p.done
	return pid, nil
}

// Restart stops the component of that name as an operator's restart
// would (SIGTERM, then SIGKILL after a grace period), runs meanwhile (if
// not nil) while it is down, and starts it again with the same arguments.
// It returns the new PID.
func (c *Cluster) Restart(name string, meanwhile func() error) (pid int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.IndexFunc(c.procs, func(p *process) bool { return p.name == name })
	if i < 0 {
		return 0, fmt.Errorf("the launcher started no %s", name)
	}
	p := c.procs[i]
	if err := p.stop(15 * time.Second); err != nil {
		return 0, fmt.Errorf("stopping %s: %w", name, err)
	}
	if meanwhile != nil {
		if err := meanwhile(); err != nil {
			err = fmt.Errorf("while %s was down: %w", name, err)
			if n, startErr := p.restart(); startErr == nil {
				c.procs[i] = n
			}
			return 0, err
		}
	}
	n, err := p.restart()
	if err != nil {
		return 0, err
	}
	c.procs[i] = n
	return n.cmd.Process.Pid, nil
}

// Restarts is how often Supervise has started the component of that name
// again.
func (c *Cluster) Restarts(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.find(name); p != nil {
		return p.restarts
	}
	return 0
}

// find is the component of that name; c.mu must be held.
func (c *Cluster) find(name string) *process {
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}
