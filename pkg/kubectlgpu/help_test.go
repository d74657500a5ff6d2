package kubectlgpu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/component-base/version"
)

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; run go test ./pkg/kubectlgpu -update to write it", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got); run go test ./pkg/kubectlgpu -update if the change is meant:\n%s", path, diff)
	}
}

// TestHelp keeps the help of every command in golden files, so a change
// of wording or of flags shows in review.
func TestHelp(t *testing.T) {
	for _, verb := range []string{"", "start", "stop", "logs", "ssh", "why", "capacity", "top", "completion"} {
		name := verb
		if name == "" {
			name = "kubectl-gpu"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, nil)
			args := append(strings.Fields(verb), "--help")
			out, _, err := f.run(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "help-"+name+".golden", out)
		})
	}
}

// --version prints the version make stamps, and -v is left to mean
// verbosity, as it does for kubectl.
func TestVersion(t *testing.T) {
	f := newFixture(t, nil)
	out, _, err := f.run(t, "--version")
	if err != nil {
		t.Fatal(err)
	}
	if want := "kubectl gpu version " + version.Get().GitVersion + "\n"; out != want {
		t.Errorf("--version printed %q, want %q", out, want)
	}
	if _, _, err := f.run(t, "-v"); err == nil {
		t.Error("-v was taken; it should be unknown, as kubectl's verbosity")
	}
}

// TestEveryVerbHasExamples: --help of each verb shows how to use it.
func TestEveryVerbHasExamples(t *testing.T) {
	f := newFixture(t, nil)
	root := NewCommand(&Options{NewClients: func() (*Clients, error) { return &Clients{Kiln: f.kiln, Kube: f.kube}, nil }})
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			continue
		}
		if c.Example == "" || c.Long == "" {
			t.Errorf("%s has no example or no long help", c.Name())
		}
	}
}

func TestCompletion(t *testing.T) {
	for _, tc := range []struct {
		shell, want string
	}{
		{"bash", "# bash completion V2 for kubectl-gpu"},
		{"zsh", "#compdef kubectl-gpu"},
	} {
		f := newFixture(t, nil)
		out, _, err := f.run(t, "completion", tc.shell)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("completion %s: %v, output starts %q, want it to contain %q", tc.shell, err, firstLine(out), tc.want)
		}
	}
	f := newFixture(t, nil)
	if _, _, err := f.run(t, "completion", "fish"); err == nil {
		t.Error("completion fish succeeded; want an error naming bash and zsh")
	}
}

// TestCompletesInstanceNames: kubectl-gpu __complete, which shells call,
// offers the namespace's Instances.
func TestCompletesInstanceNames(t *testing.T) {
	f := newFixture(t, objs(instance("notebook"), instance("trainer")))
	out, _, err := f.run(t, "__complete", "start", "-n", ns, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "notebook\ntrainer\n") {
		t.Errorf("completion of start = %q, want notebook and trainer", out)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
