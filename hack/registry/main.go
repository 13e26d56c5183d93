// Command registry is distribution's OCI registry (the version in go.mod)
// with only what hack/cluster uses: the filesystem storage driver and
// htpasswd basic auth. `registry htpasswd USER` reads a password on stdin
// and prints the bcrypt htpasswd line the registry's auth reads.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "htpasswd" {
		os.Exit(htpasswd(os.Args[2]))
	}
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}

func htpasswd(user string) int {
	if user == "" || strings.ContainsAny(user, ":\n") {
		fmt.Fprintln(os.Stderr, "registry htpasswd: the user name must be non-empty, without ':' or newlines")
		return 2
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(os.Stderr, "registry htpasswd: no password on stdin")
		return 2
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(strings.TrimRight(line, "\r\n")), bcrypt.DefaultCost)
	if err != nil {
		fmt.Fprintln(os.Stderr, "registry htpasswd:", err)
		return 1
	}
	fmt.Printf("%s:%s\n", user, hash)
	return 0
}
