// Command tracegaps says where a program's cores went idle, from a Go
// execution trace (such as `cdcapply bench ... -trace F` writes): how long
// 0, 1, 2 ... goroutines ran at once, and the core-seconds left unused by
// cause (goroutines ready but waiting for a P held by a system call,
// a system call with nothing else to do, one goroutine running alone),
// with the time spent in each system call site.
//
//	go run ./bench/tracegaps [-top N] TRACE
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	top := flag.Int("top", 15, "causes and syscall sites listed")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracegaps [-top N] TRACE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracegaps:", err)
		os.Exit(1)
	}
	defer f.Close()
	rep, err := Analyze(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tracegaps: %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	rep.Write(os.Stdout, *top)
}
