package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// startEngineProcess runs the engine in its own process (command, speaking
// ServeEngine's protocol), so that its peak RSS, heap and CPU time are the
// engine's alone: the broker, the generator and the oracle stay in the
// harness's process.
func startEngineProcess(ctx context.Context, r *engineRun, command []string, job Job) (*engineRun, error) {
	cmd, stdin, stdout, err := startChild(ctx, command, "engine")
	if err != nil {
		return nil, err
	}
	r.send = func(v any) error {
		if err := jsonLine(stdin, v); err != nil {
			return fmt.Errorf("bench: write to the engine process: %w", err)
		}
		return nil
	}
	if err := r.send(job); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		var last []byte
		for sc.Scan() {
			line := sc.Bytes()
			if bytes.Equal(bytes.TrimSpace(line), []byte(`{"ready":true}`)) {
				close(r.ready)
				continue
			}
			last = append(last[:0], line...)
		}
		waitErr := cmd.Wait()
		if len(last) > 0 {
			var res EngineResult
			if err := json.Unmarshal(last, &res); err == nil {
				r.res = &res
			}
		}
		switch {
		case r.res == nil:
			r.err = fmt.Errorf("the engine process %v ended without a result: %v", command, waitErr)
		case r.res.Error != "":
			r.err = fmt.Errorf("%s", r.res.Error)
		case waitErr != nil:
			r.err = fmt.Errorf("the engine process %v: %w", command, waitErr)
		}
	}()
	return r, nil
}

// startChild starts one of the bench's own processes (what: "engine",
// "decode-only") with pipes to its input and output; its errors go to
// ours, and it dies with the harness.
func startChild(ctx context.Context, command []string, what string) (*exec.Cmd, io.WriteCloser, io.ReadCloser, error) {
	cmd := exec.CommandContext(ctx, command[0], command[1:]...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("bench: start the %s process %v: %w", what, command, err)
	}
	return cmd, stdin, stdout, nil
}
