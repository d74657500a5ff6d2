// Command pause is the process of the real node's Pod sandboxes and of
// Claim holders: it does nothing until it is told to stop. Built static,
// it is the whole of the pause image kiln-images writes.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
