package localcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one component the launcher started. Only these are ever
// signalled, and only by the PID the launcher got when it started them.
type process struct {
	name    string
	cmd     *exec.Cmd
	logFile string
	done    chan struct{}
	err     error
	// What it was started with, to start it again the same way.
	binary, logDir string
	args           []string
	started        time.Time
	// exitedAt is when the supervisor saw it gone; restarts counts how
	// often it was started again, failures how often in a row it ran for
	// less than stableRun, which sets the backoff.
	exitedAt           time.Time
	restarts, failures int
}

func startProcess(logDir, name, binary string, args ...string) (*process, error) {
	logFile := filepath.Join(logDir, name+".log")
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a Ctrl-C in the terminal reaches the launcher
		// only, which then stops the components in order.
		Setpgid: true,
		// If the launcher is killed outright, the kernel ends the children.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logFile: logFile, done: make(chan struct{}),
		binary: binary, logDir: logDir, args: args, started: time.Now()}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports an error if the process has already ended.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); see %s", p.name, p.err, p.logFile)
	default:
		return nil
	}
}

// stop asks the process to end and kills it if it has not after grace.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-p.done
	return nil
}

// restart starts the process again with the same binary, arguments and log.
func (p *process) restart() (*process, error) {
	n, err := startProcess(p.logDir, p.name, p.binary, p.args...)
	if err != nil {
		return nil, err
	}
	n.restarts = p.restarts + 1
	n.failures = p.failures
	return n, nil
}

// lastLogLine is the last non-empty line the process logged, which
// usually says why it exited.
func (p *process) lastLogLine() string {
	f, err := os.Open(p.logFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 4096
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		if _, err := f.Seek(-tail, io.SeekEnd); err != nil {
			return ""
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
