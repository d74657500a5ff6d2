package kubectlgpu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// sshContainerPort is the port the SSH sidecar of spec.ssh listens on. It
// reaches users through a port of spec.ports with this number, which the
// Instance's NodePort Service publishes.
const sshContainerPort = 22

type sshCommand struct {
	*Options
	exec     bool
	login    string
	identity string
}

func newSSHCommand(o *Options) *cobra.Command {
	s := &sshCommand{Options: o}
	cmd := &cobra.Command{
		Use:   "ssh NAME [-- SSH-ARGS...]",
		Short: "Print, or run, the ssh command that reaches an Instance",
		Long: `Print the ssh command that reaches an Instance's SSH sidecar: the first of
status.hostIPs (external addresses first) and the node port of the Instance's
port 22 (spec.ports, e.g. {name: ssh, port: 22}, published by its NodePort
Service; the node port stays the same across stop and start). The Instance
needs spec.ssh.authorizedKeysSecret, a Secret whose authorized_keys holds
your public key. With --exec, run it; arguments after -- go to ssh.`,
		Example: `  # Print the command
  kubectl gpu ssh notebook

  # Run it, as user jovyan, with a key of your own
  kubectl gpu ssh notebook --exec -l jovyan -i ~/.ssh/id_ed25519

  # Forward a port through it
  kubectl gpu ssh notebook --exec -- -L 8888:localhost:8888`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeInstances(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); n > 1 || (n < 0 && len(args) > 1) {
				return fmt.Errorf("one Instance at a time; pass ssh's own arguments after --")
			}
			return s.run(cmd.Context(), args[0], args[1:])
		},
	}
	cmd.Flags().BoolVar(&s.exec, "exec", false, "run ssh instead of printing the command")
	cmd.Flags().StringVarP(&s.login, "login", "l", "", "user to log in as (ssh -l)")
	cmd.Flags().StringVarP(&s.identity, "identity", "i", "", "private key file (ssh -i)")
	return cmd
}

func (s *sshCommand) run(ctx context.Context, name string, extra []string) error {
	c, ns, err := s.setup()
	if err != nil {
		return err
	}
	inst, err := c.Kiln.GpuV1alpha1().Instances(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return explain(err, "instance", name, ns)
	}
	args, err := sshArgs(inst, s.login, s.identity)
	if err != nil {
		return err
	}
	args = append(args, extra...)
	if !s.exec {
		fmt.Fprintln(s.IO.Out, shellJoin(append([]string{"ssh"}, args...)))
		return nil
	}
	if s.RunSSH != nil {
		return s.RunSSH(args)
	}
	cmd := exec.CommandContext(ctx, "ssh", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.IO.In, s.IO.Out, s.IO.ErrOut
	if cmd.Stdin == nil {
		cmd.Stdin = os.Stdin
	}
	return cmd.Run()
}

// sshArgs are ssh's arguments for the Instance: port, login, key, host.
func sshArgs(inst *v1alpha1.Instance, login, identity string) ([]string, error) {
	ref := fmt.Sprintf("instance %q in namespace %q", inst.Name, inst.Namespace)
	if inst.Spec.SSH == nil {
		return nil, fmt.Errorf("%s has no SSH: set spec.ssh.authorizedKeysSecret to a Secret holding your authorized_keys, and add {name: ssh, port: 22} to spec.ports", ref)
	}
	declared := false
	for _, p := range inst.Spec.Ports {
		declared = declared || p.Port == sshContainerPort
	}
	if !declared {
		return nil, fmt.Errorf("%s publishes no port 22, where its SSH sidecar listens: add {name: ssh, port: 22} to spec.ports", ref)
	}
	var nodePort int32
	for _, p := range inst.Status.Ports {
		if p.Port == sshContainerPort && p.NodePort != 0 {
			nodePort = p.NodePort
		}
	}
	if nodePort == 0 {
		return nil, fmt.Errorf("%s has no node port for port 22 yet (%s); try again shortly", ref, phaseLine(inst))
	}
	if len(inst.Status.HostIPs) == 0 {
		if inst.Spec.Stopped {
			return nil, fmt.Errorf("%s is stopped; start it with kubectl gpu start %s -n %s --wait", ref, inst.Name, inst.Namespace)
		}
		return nil, fmt.Errorf("%s runs on no node yet (%s); kubectl gpu why %s -n %s says why", ref, phaseLine(inst), inst.Name, inst.Namespace)
	}
	args := []string{"-p", strconv.Itoa(int(nodePort))}
	if login != "" {
		args = append(args, "-l", login)
	}
	if identity != "" {
		args = append(args, "-i", identity)
	}
	return append(args, inst.Status.HostIPs[0]), nil
}

// shellJoin quotes what a shell would split.
func shellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}
