// Command sshd is the SSH sidecar of the tests' Instances on the real
// node: enough of an SSH server to prove that `kubectl gpu ssh` reaches an
// Instance through its node port. It accepts the public keys in the
// authorized_keys file Kiln mounts from spec.ssh.authorizedKeysSecret, and
// runs commands and shells with /bin/sh, without a terminal. It is no
// production SSH image; that stays the operator's choice (--ssh-image).
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"

	"golang.org/x/crypto/ssh"
)

func main() {
	listen := flag.String("listen", ":22", "address to serve SSH on")
	keys := flag.String("authorized-keys", "/etc/kiln/ssh/authorized_keys", "the public keys that may log in")
	flag.Parse()
	_, hostKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostKey)
	if err != nil {
		log.Fatal(err)
	}
	config := &ssh.ServerConfig{
		// Read on every login, so an edited Secret counts at once.
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if authorized(*keys, key) {
				return nil, nil
			}
			return nil, fmt.Errorf("key of %s is not in %s", meta.User(), *keys)
		},
	}
	config.AddHostKey(signer)
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving SSH on %s", l.Addr())
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, config)
	}
}

// authorized says whether key is one of the file's.
func authorized(file string, key ssh.PublicKey) bool {
	rest, err := os.ReadFile(file)
	if err != nil {
		log.Print(err)
		return false
	}
	for len(rest) > 0 {
		k, _, _, next, err := ssh.ParseAuthorizedKey(rest)
		if err != nil {
			return false
		}
		if bytes.Equal(k.Marshal(), key.Marshal()) {
			return true
		}
		rest = next
	}
	return false
}

func serve(c net.Conn, config *ssh.ServerConfig) {
	conn, chans, reqs, err := ssh.NewServerConn(c, config)
	if err != nil {
		log.Printf("%s: %v", c.RemoteAddr(), err)
		return
	}
	defer conn.Close()
	log.Printf("%s logged in as %s", c.RemoteAddr(), conn.User())
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			continue
		}
		go session(ch, requests)
	}
}

// session runs the one command or shell a session asks for; it answers
// no to a terminal, which ssh takes in its stride.
func session(ch ssh.Channel, requests <-chan *ssh.Request) {
	defer ch.Close()
	for req := range requests {
		var args []string
		switch req.Type {
		case "exec":
			var cmd struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &cmd); err != nil {
				_ = req.Reply(false, nil)
				continue
			}
			args = []string{"-c", cmd.Command}
		case "shell":
		default:
			_ = req.Reply(false, nil)
			continue
		}
		_ = req.Reply(true, nil)
		status := run(ch, args)
		_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
		return
	}
}

func run(ch ssh.Channel, args []string) uint32 {
	cmd := exec.Command("/bin/sh", args...)
	cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 255
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(ch.Stderr(), err)
		return 127
	}
	// Ends with the session, once the command has.
	go func() {
		_, _ = io.Copy(stdin, ch)
		stdin.Close()
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return uint32(exit.ExitCode())
	}
	return 255
}
