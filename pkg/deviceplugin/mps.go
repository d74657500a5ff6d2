package deviceplugin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MPSPipeMountPath is where a container finds its card's MPS pipe
// directory; CUDA_MPS_PIPE_DIRECTORY says so to the CUDA driver.
const MPSPipeMountPath = "/run/kiln/mps"

// shareSeparator joins a card's UUID and a share's number in the share's
// device ID, as NVIDIA's plugin names its replicas.
const shareSeparator = "::"

// MPS serves every whole card of a Backend as Shares devices of Resource,
// each a CUDA MPS client slot: the card's MPS control daemon caps every
// client at 100/Shares percent of its threads and 1/Shares of its memory,
// so a container holding one share gets that much of the card whatever
// its own environment says (a client's CUDA_MPS_* variables may only lower
// the daemon's defaults). A card whose daemon cannot be started or
// configured serves its shares as unhealthy, saying why: nothing runs on a
// share that is not enforced. MIG devices are served as they are.
type MPS struct {
	Backend
	// Shares is the number of shares per card: the sharesPerCard of the
	// InstanceTypes whose pool this node is in.
	Shares int
	// Resource is the extended resource the shares are served under.
	Resource string
	// Control starts and configures the daemons.
	Control *MPSControl

	mu         sync.Mutex
	configured map[string]error
}

var _ Backend = &MPS{}

// Devices lists the backend's devices with each whole card replaced by its
// shares, configuring the daemon of any card seen for the first time.
func (m *MPS) Devices() ([]Device, error) {
	devices, err := m.Backend.Devices()
	if err != nil {
		return nil, err
	}
	var out []Device
	for _, d := range devices {
		if d.Parent != "" || d.Profile != "" {
			out = append(out, d)
			continue
		}
		failed := m.configure(d)
		for k := range m.Shares {
			s := d
			s.UUID = fmt.Sprintf("%s%s%d", d.UUID, shareSeparator, k)
			s.Resource, s.Parent, s.Shares = m.Resource, d.UUID, m.Shares
			s.Memory = *shareOf(d, m.Shares)
			if s.Unhealthy == "" && failed != nil {
				s.Unhealthy = "MPS control daemon: " + failed.Error()
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// configure starts and configures the card's daemon once; a failure is
// tried again at the next listing.
func (m *MPS) configure(card Device) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.configured == nil {
		m.configured = map[string]error{}
	}
	if err, ok := m.configured[card.UUID]; ok && err == nil {
		return nil
	}
	err := m.Control.Configure(card, m.Shares)
	m.configured[card.UUID] = err
	return err
}

// MPSControl runs one nvidia-cuda-mps-control daemon per card, each bound
// to its card and with a pipe directory of its own, so a container given
// one card's pipe directory reaches only that card's server.
type MPSControl struct {
	// Dir holds a directory per card: pipe/ (mounted into its containers)
	// and log/.
	Dir string
	// Command is nvidia-cuda-mps-control.
	Command string
	// Timeout bounds each call of Command; ten seconds if zero.
	Timeout time.Duration
}

// PipeDir is the card's pipe directory on the node.
func (c *MPSControl) PipeDir(card string) string { return filepath.Join(c.Dir, card, "pipe") }

// LogDir is where the card's daemon logs (control.log).
func (c *MPSControl) LogDir(card string) string { return filepath.Join(c.Dir, card, "log") }

// Limits are the control commands that cap each client of a card cut into
// shares: a share of its threads, and of its memory (the daemon sees one
// device, ordinal 0).
func Limits(card Device, shares int) []string {
	return []string{
		fmt.Sprintf("set_default_active_thread_percentage %d", 100/shares),
		fmt.Sprintf("set_default_device_pinned_mem_limit 0 %dM", shareOf(card, shares).Value()/(1<<20)),
	}
}

// shareOf is a card's memory divided into shares, rounded down to a MiB.
func shareOf(card Device, shares int) *resource.Quantity {
	mib := card.Memory.Value() / (1 << 20) / int64(shares)
	return resource.NewQuantity(mib<<20, resource.BinarySI)
}

// Configure sends the card's daemon its limits, starting the daemon first
// if none answers. The limits are defaults for servers the daemon starts
// after them, so they are set before any container of the card's runs.
func (c *MPSControl) Configure(card Device, shares int) error {
	if card.Memory.Value() < int64(shares)<<20 {
		// A limit of 0M would not cap a share at its part of the card.
		return fmt.Errorf("the memory of %s is not known, so its shares cannot be capped", card.UUID)
	}
	for _, dir := range []string{c.PipeDir(card.UUID), c.LogDir(card.UUID)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	commands := strings.Join(Limits(card, shares), "\n") + "\n"
	if err := c.run(card, commands); err == nil {
		return nil
	}
	// No daemon answers: start one (-d forks it into the background).
	if err := c.run(card, "", "-d"); err != nil {
		return fmt.Errorf("starting it for %s: %w", card.UUID, err)
	}
	if err := c.run(card, commands); err != nil {
		return fmt.Errorf("setting the limits of %s: %w", card.UUID, err)
	}
	return nil
}

func (c *MPSControl) run(card Device, stdin string, args ...string) error {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Command, args...)
	cmd.Env = append(os.Environ(),
		"CUDA_VISIBLE_DEVICES="+card.UUID,
		"CUDA_MPS_PIPE_DIRECTORY="+c.PipeDir(card.UUID),
		"CUDA_MPS_LOG_DIRECTORY="+c.LogDir(card.UUID))
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(out.String()); msg != "" {
			return fmt.Errorf("%s %s: %w: %s", c.Command, strings.Join(args, " "), err, msg)
		}
		return fmt.Errorf("%s %s: %w", c.Command, strings.Join(args, " "), err)
	}
	return nil
}
