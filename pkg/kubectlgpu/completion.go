package kubectlgpu

import (
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newCompletionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh",
		Short: "Print the shell completion script of kubectl-gpu",
		Long: `Print the completion script of kubectl-gpu for bash or zsh.

Load it into the shell to complete the verbs, flags and Instance names of
kubectl-gpu. kubectl itself completes "kubectl gpu ..." when an executable
named kubectl_complete-gpu on the PATH runs "kubectl-gpu __complete "$@"".`,
		Example: `  # Complete kubectl-gpu in this bash session
  source <(kubectl gpu completion bash)

  # In zsh
  source <(kubectl gpu completion zsh)`,
		ValidArgs: []string{"bash", "zsh"},
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(cmd.OutOrStdout(), true)
			case "zsh":
				return root.GenZshCompletion(cmd.OutOrStdout())
			}
			return fmt.Errorf("unknown shell %q: use bash or zsh", args[0])
		},
	}
}

// completeInstances completes the names of the namespace's Instances.
func completeInstances(o *Options) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, ns, err := o.setup()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list, err := c.Kiln.GpuV1alpha1().Instances(ns).List(cmd.Context(), metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, i := range list.Items {
			names = append(names, i.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
