// Command pause is the program of the pause image hack/e2e-images builds
// (registry.k8s.io/pause:<tag>, which upstream's e2e specs run as an
// ordinary container): it does nothing until SIGINT or SIGTERM, then exits
// 0, and reaps any child that is re-parented to it while it runs as PID 1.
// Written for rkube; a static binary (CGO off), so the image needs nothing
// else.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
