// Command schemaregistry is a small schema registry that speaks the
// Confluent Schema Registry REST API, for local tests and fixture recording.
//
// Neither Confluent's registry nor Karapace is installable from the package
// registries this project can reach, and Apicurio's application cannot be
// assembled from what Maven Central serves of it (see scripts/README-infra.md),
// so this stands in for them. It implements the part of the API that
// serializers, converters and franz-go's sr client use: registering and
// looking up schemas under subjects, fetching schemas by global id, listing
// subjects and versions, and storing (not enforcing) compatibility settings.
// Ids are global and content-addressed like Confluent's: the same schema text
// under any subject gets the same id. Avro schemas are parsed before they are
// accepted. State is kept in a JSON file so a restart keeps every id.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/cdcapply/cdcapply/scripts/infra/schemaregistry/registry"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "schemaregistry:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("listen", "127.0.0.1:18081", "address to listen on")
	state := flag.String("state", "", "JSON file that keeps the registry's state across restarts (empty: memory only)")
	flag.Parse()
	reg, err := registry.Open(*state)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: reg.Handler()}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		_ = srv.Close()
	}()
	fmt.Printf("schemaregistry listening on %s (state %q)\n", ln.Addr(), *state)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
