// Command coredns is CoreDNS (the version in go.mod) with the plugins a
// cluster's DNS add-on uses, in CoreDNS's own plugin order (plugin.cfg), and
// none of the cloud back ends: hack/cluster builds it into the cluster DNS
// image.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/cancel"
	_ "github.com/coredns/coredns/plugin/debug"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/whoami"
)

// The plugins' order in a server block, as CoreDNS's plugin.cfg has it.
var directives = []string{
	"cancel", "reload", "bind", "debug", "ready", "health", "prometheus",
	"errors", "log", "loadbalance", "cache", "rewrite", "hosts",
	"kubernetes", "loop", "forward", "whoami",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
