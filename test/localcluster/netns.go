package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardFromNetns listens in network namespace ns on host:port, and
// forwards every connection to addr as the launcher's own
// namespace reaches it. The socket is made inside ns by a thread that
// enters ns for that alone; serving it needs no thread there.
func forwardFromNetns(ns, host string, port int, addr string) (net.Listener, error) {
	ln, err := listenIn(ns, net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return ln, nil
}

func listenIn(ns, addr string) (net.Listener, error) {
	runtime.LockOSThread()
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer own.Close()
	target, err := os.Open(filepath.Join(netnsDir, ns))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	ln, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, and so ends with this goroutine rather
		// than serve others from the wrong namespace.
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("returning from namespace %s: %w", ns, err)
	}
	runtime.UnlockOSThread()
	return ln, lerr
}

// killShims ends what containerd under dir left running once it is
// stopped: every container runc created under dir's runc root, then the
// shims that watched them. Both are known by the paths under dir that
// their command lines or state name, so nothing else is touched.
func killShims(dir string) error {
	var errs []error
	root := filepath.Join(dir, "state", "runc")
	namespaces, _ := os.ReadDir(root)
	for _, ns := range namespaces {
		containers, _ := os.ReadDir(filepath.Join(root, ns.Name()))
		for _, ctr := range containers {
			out, err := exec.Command("runc", "--root", filepath.Join(root, ns.Name()), "delete", "--force", ctr.Name()).CombinedOutput()
			if err != nil {
				errs = append(errs, fmt.Errorf("runc delete %s: %w: %s", ctr.Name(), err, strings.TrimSpace(string(out))))
			}
		}
	}
	socket := filepath.Join(dir, "containerd.sock")
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "containerd-shim-runc-v2" && slices.Contains(args, socket) {
			var pid int
			if _, err := fmt.Sscan(p.Name(), &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return errors.Join(errs...)
}

// removeNetnsDir undoes what the first `ip netns add` did when there was
// no /run/netns: the directory, bind-mounted on itself. Only while empty,
// since another namespace there is someone else's.
func removeNetnsDir() error {
	entries, err := os.ReadDir(netnsDir)
	if err != nil || len(entries) > 0 {
		return nil
	}
	if mountedAt(netnsDir) {
		if err := unix.Unmount(netnsDir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", netnsDir, err)
		}
	}
	return os.Remove(netnsDir)
}

// mountedAt says whether something is mounted at path.
func mountedAt(path string) bool {
	return slices.Contains(mountPoints(), path)
}

// mountPoints are the mount points of this mount namespace.
func mountPoints() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 4 {
			points = append(points, fields[4])
		}
	}
	return points
}

// unmountUnder detaches every mount below dir, deepest first: the
// containers' root filesystems, the Pods' network namespaces and volumes.
func unmountUnder(dir string) error {
	var points []string
	for _, p := range mountPoints() {
		if strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// removeCreated removes a path the real node created: a cgroup (an empty
// directory tree the kernel lets go of only leaf first) or anything else.
func removeCreated(p string) error {
	if !strings.HasPrefix(p, "/sys/fs/cgroup/") {
		return os.RemoveAll(p)
	}
	var dirs []string
	_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}
