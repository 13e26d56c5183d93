// Command hostpathproxy is the program of the
// registry.k8s.io/sig-storage/hostpathplugin image hack/e2e-images builds,
// standing in for the proxy mode of the CSI hostpath driver
// (github.com/kubernetes-csi/csi-driver-host-path, which the Go module
// proxy does not serve). Upstream's [DRA] e2e specs run the DRA test
// driver inside e2e.test and reach the node through a pod of that image:
// they exec `/hostpathplugin --endpoint=SOCKET --proxy-endpoint=tcp://:PORT`
// in it and port-forward to PORT. This program listens on both; each
// connection made to the socket (by the kubelet) is paired with the next
// connection made to the port (by e2e.test through port forwarding), and
// bytes are copied both ways until either side closes. Other flags the
// suite passes (--v) are accepted and ignored. Written for rkube; standard
// library only, a static binary (CGO off).
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
)

func listen(endpoint string) (net.Listener, error) {
	network, addr := "unix", endpoint
	if i := strings.Index(endpoint, "://"); i >= 0 {
		network, addr = endpoint[:i], endpoint[i+3:]
	}
	if network == "unix" {
		// A socket left by an earlier run.
		if err := os.Remove(addr); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return net.Listen(network, addr)
}

func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
}

func main() {
	endpoint := flag.String("endpoint", "", "the Unix socket to listen on")
	proxy := flag.String("proxy-endpoint", "", "where the other end connects (tcp://:PORT)")
	flag.Int("v", 0, "log level (ignored)")
	flag.Parse()
	if *endpoint == "" || *proxy == "" {
		fmt.Fprintln(os.Stderr, "hostpathproxy: --endpoint and --proxy-endpoint are required")
		os.Exit(2)
	}
	local, err := listen(*endpoint)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostpathproxy: listen on %s: %v\n", *endpoint, err)
		os.Exit(1)
	}
	remote, err := listen(*proxy)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hostpathproxy: listen on %s: %v\n", *proxy, err)
		os.Exit(1)
	}
	for {
		r, err := remote.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "hostpathproxy: accept on %s: %v\n", *proxy, err)
			os.Exit(1)
		}
		l, err := local.Accept()
		if err != nil {
			fmt.Fprintf(os.Stderr, "hostpathproxy: accept on %s: %v\n", *endpoint, err)
			os.Exit(1)
		}
		go pipe(l, r)
	}
}
