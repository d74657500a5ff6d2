package kubectlgpu

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/accounting"
)

// TypeCapacity is one row of kubectl gpu capacity: what one InstanceType
// has free and what this namespace may start of it.
type TypeCapacity struct {
	Type      string `json:"type"`
	Phase     string `json:"phase,omitempty"`
	Cards     int32  `json:"cards"`
	FreeCards int32  `json:"freeCards"`
	// BudgetCards is how many one-card Instances the namespace's Budgets
	// leave room for; nil when no Budget limits them.
	BudgetCards *int64 `json:"budgetCards,omitempty"`
	// CanStart is how many one-card Instances could start now: the smaller
	// of the free cards and BudgetCards, 0 on a held type.
	CanStart int64 `json:"canStart"`
	// LimitedBy names what bounds CanStart: "cards", "hold", or a Budget
	// and its key as budget/NAME:KEY.
	LimitedBy  string              `json:"limitedBy"`
	Partitions []PartitionCapacity `json:"partitions,omitempty"`
}

// PartitionCapacity is the same for one partition profile.
type PartitionCapacity struct {
	Name        string `json:"name"`
	Free        int32  `json:"free"`
	Total       int32  `json:"total"`
	BudgetFits  *int64 `json:"budgetFits,omitempty"`
	CanStart    int64  `json:"canStart"`
	LimitedBy   string `json:"limitedBy"`
	MilliCharge int64  `json:"milliCardsCharged"`
}

type capacity struct {
	*Options
	output string
}

func newCapacityCommand(o *Options) *cobra.Command {
	c := &capacity{Options: o}
	cmd := &cobra.Command{
		Use:   "capacity",
		Short: "Show what this namespace can start now, per InstanceType",
		Long: `Show, per InstanceType with accelerators: the free cards of its pool now
(status.capacity, kept by kiln-controller), what this namespace's Budgets
leave (status.hard minus status.used, for the keys accelerators,
accelerators.<type>, accelerator-memory and instances), and so how many
one-card Instances you could start right now (CAN START) and what limits that
number. Partition profiles are listed the same way, one partition each.

It is a snapshot: another start can take the cards first, and admission and
the scheduler decide. kubectl gpu why NAME explains an Instance that did not
start.`,
		Example: `  # What can I start in my namespace?
  kubectl gpu capacity

  # In another namespace, as YAML
  kubectl gpu capacity -n team-b -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.run(cmd.Context())
		},
	}
	cmd.Flags().StringVarP(&c.output, "output", "o", "", "output format: json or yaml (default: a table)")
	return cmd
}

func (c *capacity) run(ctx context.Context) error {
	if err := checkOutput(c.output); err != nil {
		return err
	}
	clients, ns, err := c.setup()
	if err != nil {
		return err
	}
	rows, warnings, err := capacities(ctx, clients, ns)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(c.IO.ErrOut, "Warning: %s\n", w)
	}
	if c.output != "" {
		return writeStructured(c.IO.Out, c.output, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(c.IO.Out, "No InstanceTypes with accelerators found.")
		return nil
	}
	w := tabwriter.NewWriter(c.IO.Out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "TYPE\tPHASE\tFREE CARDS\tBUDGET LEFT (CARDS)\tCAN START\tLIMITED BY\tPARTITIONS (FREE/TOTAL, CAN START)")
	for _, r := range rows {
		budget := "-"
		if r.BudgetCards != nil {
			budget = strconv.FormatInt(*r.BudgetCards, 10)
		}
		var parts []string
		for _, p := range r.Partitions {
			parts = append(parts, fmt.Sprintf("%s %d/%d, %d", p.Name, p.Free, p.Total, p.CanStart))
		}
		partitions := "-"
		if len(parts) > 0 {
			partitions = strings.Join(parts, "; ")
		}
		fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%d\t%s\t%s\n", r.Type, orUnknown(r.Phase), r.FreeCards, r.Cards, budget, r.CanStart, r.LimitedBy, partitions)
	}
	return w.Flush()
}

// capacities composes the rows from the InstanceTypes and the namespace's
// Budgets, charging each with the arithmetic admission uses.
// Budgets that cannot see all that runs, or could not price it, are
// warned about.
func capacities(ctx context.Context, c *Clients, ns string) ([]TypeCapacity, []string, error) {
	types, err := c.Kiln.GpuV1alpha1().InstanceTypes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing InstanceTypes: %w", err)
	}
	budgets, err := c.Kiln.GpuV1alpha1().Budgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing the Budgets of namespace %q: %w", ns, err)
	}
	var warnings []string
	for _, b := range budgets.Items {
		for _, cond := range b.Status.Conditions {
			if (cond.Type == v1alpha1.BudgetConditionGuarded || cond.Type == v1alpha1.BudgetConditionCounted) && cond.Status == metav1.ConditionFalse {
				warnings = append(warnings, fmt.Sprintf("budget/%s: %s", b.Name, cond.Message))
			}
		}
	}
	var rows []TypeCapacity
	for i := range types.Items {
		t := &types.Items[i]
		if t.Spec.Accelerator == nil {
			continue
		}
		row := TypeCapacity{Type: t.Name, Phase: string(t.Status.Phase), Cards: t.Status.Capacity.Cards, FreeCards: t.Status.Capacity.FreeCards}
		charge, _ := chargeOf(accounting.Request{Type: t.Name, Cards: ptr.To[int32](1)}, t)
		row.BudgetCards, row.CanStart, row.LimitedBy = bound(int64(row.FreeCards), "cards", charge, budgets.Items, t)
		for _, p := range t.Status.Capacity.Partitions {
			pc := PartitionCapacity{Name: p.Name, Free: p.Free, Total: p.Total}
			pcharge, share := chargeOf(accounting.Request{Type: t.Name, Partition: p.Name}, t)
			pc.MilliCharge = share
			pc.BudgetFits, pc.CanStart, pc.LimitedBy = bound(int64(p.Free), "partitions", pcharge, budgets.Items, t)
			row.Partitions = append(row.Partitions, pc)
		}
		rows = append(rows, row)
	}
	return rows, warnings, nil
}

// chargeOf is what one new Instance of the request charges a Budget, and
// its share of a card in thousandths.
func chargeOf(req accounting.Request, t *v1alpha1.InstanceType) (gpu.BudgetResourceList, int64) {
	share, err := accounting.ShareOf(req, t)
	if err != nil {
		return nil, 0
	}
	return accounting.InstanceCharge(&gpu.InstanceSpec{}, accounting.Charge(share, t.Name)), share.MilliCards
}

// bound is the smaller of free and what every Budget leaves for charge.
func bound(free int64, unit string, charge gpu.BudgetResourceList, budgets []v1alpha1.Budget, t *v1alpha1.InstanceType) (*int64, int64, string) {
	var budgetFits *int64
	can, by := free, unit
	for i := range budgets {
		r := roomFor(&budgets[i], charge)
		if r.fits < 0 {
			continue
		}
		if budgetFits == nil || r.fits < *budgetFits {
			budgetFits = ptr.To(r.fits)
		}
		if r.fits < can {
			can, by = r.fits, fmt.Sprintf("budget/%s:%s", r.budget, r.key)
		}
	}
	if t.Spec.Hold != v1alpha1.HoldNone {
		can, by = 0, "hold ("+string(t.Spec.Hold)+")"
	}
	return budgetFits, can, by
}

func checkOutput(o string) error {
	switch o {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("unknown output format %q: use json or yaml, or leave -o out for a table", o)
}

func writeStructured(w io.Writer, format string, v any) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "    ")
		return enc.Encode(v)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
