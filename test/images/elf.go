package images

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// interpreter is the dynamic loader an ELF binary names (PT_INTERP), or ""
// for a static binary.
func interpreter(binary string) (string, error) {
	f, err := elf.Open(binary)
	if err != nil {
		return "", fmt.Errorf("%s: %w", binary, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("%s: reading its interpreter: %w", binary, err)
		}
		return string(bytes.TrimRight(b, "\x00")), nil
	}
	return "", nil
}

// libraryDirs are where Debian's loader looks for a library by default on
// this machine's architecture.
func libraryDirs() []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"}
}

// sharedLibraries are the libraries the loader maps to start binary: those
// its DT_NEEDED names, then theirs, each at the first of dirs that has it.
func sharedLibraries(binary string, dirs []string) ([]string, error) {
	var libs []string
	found := map[string]bool{}
	for queue := []string{binary}; len(queue) > 0; queue = queue[1:] {
		needed, err := neededBy(queue[0])
		if err != nil {
			return nil, err
		}
		for _, soname := range needed {
			path, err := findLibrary(soname, dirs)
			if err != nil {
				return nil, fmt.Errorf("%s, needed by %s: %w", soname, queue[0], err)
			}
			if !found[path] {
				found[path] = true
				libs, queue = append(libs, path), append(queue, path)
			}
		}
	}
	slices.Sort(libs)
	return libs, nil
}

func neededBy(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	return f.DynString(elf.DT_NEEDED)
}

func findLibrary(soname string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, soname)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not in %s", strings.Join(dirs, ", "))
}

// debianPackages are the Debian packages, as name=version, that own the
// files at paths, by dpkg's database.
func debianPackages(paths ...string) ([]string, error) {
	out, err := exec.Command("dpkg-query", append([]string{"-S"}, paths...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-query -S %s: %w", strings.Join(paths, " "), commandError(err))
	}
	var names []string
	for s := bufio.NewScanner(bytes.NewReader(out)); s.Scan(); {
		// "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6", or a list of
		// packages before the path; diversions have lines of their own.
		pkgs, _, ok := strings.Cut(s.Text(), ": ")
		if !ok || strings.HasPrefix(pkgs, "diversion by ") {
			continue
		}
		for _, p := range strings.Split(pkgs, ", ") {
			if !slices.Contains(names, p) {
				names = append(names, p)
			}
		}
	}
	out, err = exec.Command("dpkg-query", append([]string{"-W", "-f", "${Package}=${Version}\n"}, names...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-query -W %s: %w", strings.Join(names, " "), commandError(err))
	}
	versions := strings.Fields(string(out))
	slices.Sort(versions)
	return slices.Compact(versions), nil
}

// commandError adds what a command wrote to stderr to its error.
func commandError(err error) error {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}
