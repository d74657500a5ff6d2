package kubectlgpu

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// Allocation is one row of kubectl gpu top: a device an Instance holds.
type Allocation struct {
	Namespace string `json:"namespace"`
	Instance  string `json:"instance"`
	Phase     string `json:"phase"`
	Node      string `json:"node,omitempty"`
	// Device is empty for a running Instance the node agent has not
	// reported devices for yet.
	Device   string `json:"device,omitempty"`
	Index    int32  `json:"index"`
	PCIBusID string `json:"pciBusID,omitempty"`
	Mode     string `json:"mode,omitempty"`
	Share    string `json:"share,omitempty"`
	// Isolation is what keeps the Instance to its share: Exclusive, MIG,
	// MPS or HAMi.
	Isolation string `json:"isolation,omitempty"`
	// Utilization, MemoryUsed and LastActiveTime are what the node agent
	// last reported of the device in NodeDevices; unset where it reports
	// none (a MIG device or MPS share, or an agent that cannot sample).
	Utilization    *int32       `json:"utilization,omitempty"`
	MemoryUsed     string       `json:"memoryUsed,omitempty"`
	LastActiveTime *metav1.Time `json:"lastActiveTime,omitempty"`
}

type top struct {
	*Options
	all    bool
	output string
}

func newTopCommand(o *Options) *cobra.Command {
	t := &top{Options: o}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show the devices each Instance holds",
		Long: `Show, per Instance that is not stopped, the node it runs on and each device
it holds (status.allocations, reported by the node agent): the device UUID,
its index on the node and PCI bus ID, and the mode and share (a whole card,
a slice's memory and compute percentages, or a MIG profile). An Instance
that runs on no device yet shows one row with the device as <none>.

UTIL, MEMORY USED and IDLE FOR are what the node agent last reported of
the device in its node's NodeDevices: how busy its engines have been of
late (smoothed over the agent's samples), the memory in use, and how long
since it was last active ("never" if not since the agent began sampling
it). The agent
writes small changes at most once a minute, so a busy device can show up
to a minute idle. A device the agent does not sample shows "-".`,
		Example: `  # The devices of this namespace's Instances
  kubectl gpu top

  # Of every namespace you may list Instances in
  kubectl gpu top -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return t.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVarP(&t.all, "all-namespaces", "A", false, "Instances of every namespace")
	cmd.Flags().StringVarP(&t.output, "output", "o", "", "output format: json or yaml (default: a table)")
	return cmd
}

func (t *top) run(ctx context.Context) error {
	if err := checkOutput(t.output); err != nil {
		return err
	}
	c, ns, err := t.setup()
	if err != nil {
		return err
	}
	if t.all {
		ns = metav1.NamespaceAll
	}
	list, err := c.Kiln.GpuV1alpha1().Instances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Instances: %w", err)
	}
	rows := allocations(list.Items)
	if err := withUsage(ctx, c, rows, t.all); err != nil {
		return err
	}
	if t.output != "" {
		return writeStructured(t.IO.Out, t.output, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(t.IO.Out, "No running Instances %s.\n", scope(ns, t.all))
		return nil
	}
	w := tabwriter.NewWriter(t.IO.Out, 0, 8, 2, ' ', 0)
	if t.all {
		fmt.Fprint(w, "NAMESPACE\t")
	}
	fmt.Fprintln(w, "INSTANCE\tPHASE\tNODE\tDEVICE\tINDEX\tPCI BUS ID\tMODE\tSHARE\tISOLATION\tUTIL\tMEMORY USED\tIDLE FOR")
	now := time.Now()
	for _, r := range rows {
		if t.all {
			fmt.Fprintf(w, "%s\t", r.Namespace)
		}
		device, index := r.Device, fmt.Sprint(r.Index)
		if device == "" {
			device, index = "<none>", "-"
		}
		util, idle := "-", "-"
		if r.Utilization != nil {
			util, idle = fmt.Sprintf("%d%%", *r.Utilization), "never"
			if r.LastActiveTime != nil {
				idle = duration.HumanDuration(now.Sub(r.LastActiveTime.Time))
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Instance, r.Phase, dash(r.Node), device, index, dash(r.PCIBusID),
			dash(r.Mode), dash(r.Share), dash(r.Isolation), util, dash(r.MemoryUsed), idle)
	}
	return w.Flush()
}

// scope says which namespaces a listing covered, for its empty answer.
func scope(ns string, all bool) string {
	if all {
		return "in any namespace"
	}
	return "in namespace " + ns
}

// withUsage fills the rows' usage from the NodeDevices of their nodes:
// one GET per node for a namespace's rows, which are on few nodes; one
// LIST for every namespace's (-A), whose rows can be on every node of a
// large pool. Every user may read NodeDevices; a node the agent has not
// reported yet leaves its rows without.
func withUsage(ctx context.Context, c *Clients, rows []Allocation, all bool) error {
	byNode := map[string]map[string]v1alpha1.NodeDevice{}
	index := func(nd *v1alpha1.NodeDevices) {
		devices := map[string]v1alpha1.NodeDevice{}
		for _, d := range nd.Status.Devices {
			devices[d.UUID] = d
		}
		byNode[nd.Name] = devices
	}
	if all && len(rows) > 0 {
		list, err := c.Kiln.GpuV1alpha1().NodeDevices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing NodeDevices: %w", err)
		}
		for i := range list.Items {
			index(&list.Items[i])
		}
	}
	for i := range rows {
		r := &rows[i]
		if r.Node == "" || r.Device == "" {
			continue
		}
		if _, seen := byNode[r.Node]; !seen && !all {
			byNode[r.Node] = nil
			nd, err := c.Kiln.GpuV1alpha1().NodeDevices().Get(ctx, r.Node, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return fmt.Errorf("reading the NodeDevices of node %s: %w", r.Node, err)
			default:
				index(nd)
			}
		}
		d, ok := byNode[r.Node][r.Device]
		if !ok || d.Utilization == nil {
			continue
		}
		r.Utilization, r.LastActiveTime = d.Utilization, d.LastActiveTime
		if d.MemoryUsed != nil {
			r.MemoryUsed = d.MemoryUsed.String()
		}
	}
	return nil
}

// allocations are the rows of the Instances that are not stopped, sorted
// by namespace, name and device index.
func allocations(items []v1alpha1.Instance) []Allocation {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
	var rows []Allocation
	for _, inst := range items {
		if inst.Spec.Stopped && len(inst.Status.Allocations) == 0 {
			continue
		}
		base := Allocation{Namespace: inst.Namespace, Instance: inst.Name, Phase: string(inst.Status.Phase), Node: inst.Status.NodeName}
		if len(inst.Status.Allocations) == 0 {
			rows = append(rows, base)
			continue
		}
		allocs := append([]v1alpha1.DeviceAllocation(nil), inst.Status.Allocations...)
		sort.SliceStable(allocs, func(i, j int) bool { return allocs[i].Index < allocs[j].Index })
		for _, a := range allocs {
			r := base
			r.Device, r.Index, r.PCIBusID, r.Mode, r.Share, r.Isolation = a.Device, a.Index, a.PCIBusID, string(a.Mode), share(a), string(a.Isolation)
			rows = append(rows, r)
		}
	}
	return rows
}

func share(a v1alpha1.DeviceAllocation) string {
	switch a.Mode {
	case v1alpha1.AllocationExclusive:
		return "whole card"
	case v1alpha1.AllocationSlice:
		return fmt.Sprintf("%d%% memory, %d%% compute", a.MemoryPercent, a.CoresPercent)
	case v1alpha1.AllocationPartition:
		return a.Profile
	}
	return ""
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
