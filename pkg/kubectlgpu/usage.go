package kubectlgpu

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// UsageRow is one row of kubectl gpu usage: the card-hours one Budget
// counts of one InstanceType this period.
type UsageRow struct {
	Namespace string `json:"namespace"`
	Budget    string `json:"budget"`
	// Period is "Month" or "<n> days"; Since is when it began.
	Period string       `json:"period"`
	Since  *metav1.Time `json:"since,omitempty"`
	Type   string       `json:"instanceType"`
	// CardHours and IdleHours are in thousandths of a card-hour, rounded
	// down, as a decimal string.
	CardHours string `json:"cardHours"`
	IdleHours string `json:"idleHours"`
	// Limit is the accelerator-hours key that counts this type, with its
	// consumed and hard quantities; empty when none.
	Limit string `json:"limit,omitempty"`
	// CountedAt is when kiln-apiserver counted it (status.consumedTime).
	CountedAt *metav1.Time `json:"countedAt,omitempty"`
}

type usage struct {
	*Options
	all    bool
	output string
}

func newUsageCommand(o *Options) *cobra.Command {
	u := &usage{Options: o}
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show the card-hours each Budget counts this period",
		Long: `Show, per Budget and InstanceType, the card-hours the namespace's Instances
and Claims held this period (status.usage of the Budget): whole cards by
the hour, a slice or partition by its share of a card. An Instance counts
from its Pod's binding to a node until its deletion is asked for; a Claim
while it is Bound or Attached; an Instance on its Claim's cards counts
under the Claim. IDLE is the part held after the devices were last active
in each run, as the node agent measures them.

The period is the Budget's spec.period: the UTC calendar month, or the
last n UTC days. LIMIT is the accelerator-hours key that counts the type,
with what it has consumed and its limit. kiln-apiserver recounts at least
once a minute while anything runs; COUNTED says when it last did.`,
		Example: `  # This namespace's card-hours
  kubectl gpu usage

  # Every namespace you may read Budgets in
  kubectl gpu usage -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return u.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVarP(&u.all, "all-namespaces", "A", false, "Budgets of every namespace")
	cmd.Flags().StringVarP(&u.output, "output", "o", "", "output format: json or yaml (default: a table)")
	return cmd
}

func (u *usage) run(ctx context.Context) error {
	if err := checkOutput(u.output); err != nil {
		return err
	}
	c, ns, err := u.setup()
	if err != nil {
		return err
	}
	if u.all {
		ns = metav1.NamespaceAll
	}
	list, err := c.Kiln.GpuV1alpha1().Budgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Budgets: %w", err)
	}
	rows := usageRows(list.Items)
	if u.output != "" {
		return writeStructured(u.IO.Out, u.output, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(u.IO.Out, "No card-hours counted by a Budget %s this period.\n", scope(ns, u.all))
		return nil
	}
	w := tabwriter.NewWriter(u.IO.Out, 0, 8, 2, ' ', 0)
	if u.all {
		fmt.Fprint(w, "NAMESPACE\t")
	}
	fmt.Fprintln(w, "BUDGET\tPERIOD\tSINCE\tTYPE\tCARD-HOURS\tIDLE\tLIMIT\tCOUNTED")
	for _, r := range rows {
		if u.all {
			fmt.Fprintf(w, "%s\t", r.Namespace)
		}
		since, counted := "-", "-"
		if r.Since != nil {
			since = r.Since.UTC().Format(time.DateOnly)
		}
		if r.CountedAt != nil {
			counted = r.CountedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Budget, r.Period, since, r.Type, r.CardHours, r.IdleHours, dash(r.Limit), counted)
	}
	return w.Flush()
}

// usageRows are the Budgets' rows, one per type they counted, and one
// for a key of every type ("*") with no type of its own counted.
func usageRows(budgets []v1alpha1.Budget) []UsageRow {
	sort.Slice(budgets, func(i, j int) bool {
		if budgets[i].Namespace != budgets[j].Namespace {
			return budgets[i].Namespace < budgets[j].Namespace
		}
		return budgets[i].Name < budgets[j].Name
	})
	var rows []UsageRow
	for _, b := range budgets {
		period := "Month"
		if p := b.Spec.Period; p != nil && p.RollingDays > 0 {
			period = fmt.Sprintf("%d days", p.RollingDays)
		}
		base := UsageRow{Namespace: b.Namespace, Budget: b.Name, Period: period, Since: b.Status.PeriodStart, CountedAt: b.Status.ConsumedTime}
		for _, t := range b.Status.Usage {
			r := base
			r.Type, r.CardHours, r.IdleHours = t.InstanceType, hoursText(t.CardSeconds), hoursText(t.IdleCardSeconds)
			r.Limit = limitText(&b, v1alpha1.BudgetAcceleratorHoursPerTypePrefix+t.InstanceType)
			rows = append(rows, r)
		}
		if limit := limitText(&b, string(v1alpha1.BudgetAcceleratorHours)); limit != "" {
			held, idle := resource.Quantity{}, resource.Quantity{}
			for _, t := range b.Status.Usage {
				held.Add(t.CardSeconds)
				idle.Add(t.IdleCardSeconds)
			}
			r := base
			r.Type, r.CardHours, r.IdleHours, r.Limit = "*", hoursText(held), hoursText(idle), limit
			rows = append(rows, r)
		}
	}
	return rows
}

// hoursText is card-seconds as card-hours to the thousandth, rounded down.
func hoursText(cardSeconds resource.Quantity) string {
	th := cardSeconds.MilliValue() / 3600
	return fmt.Sprintf("%d.%03d", th/1000, th%1000)
}

// limitText is "<key> <consumed>/<hard>" for a key the Budget limits.
func limitText(b *v1alpha1.Budget, key string) string {
	hard, ok := b.Spec.Hard[v1alpha1.BudgetResourceName(key)]
	if !ok {
		return ""
	}
	consumed := b.Status.Consumed[v1alpha1.BudgetResourceName(key)]
	m := consumed.MilliValue()
	return fmt.Sprintf("%s %d.%03d/%s", key, m/1000, m%1000, hard.String())
}
