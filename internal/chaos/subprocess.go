package chaos

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ChildRoleEnv names the environment variable that turns a re-executed test binary into
// a helper process; its value is the role.
const ChildRoleEnv = "OUTBOX_CHAOS_CHILD_ROLE"

// ChildRole returns the role this process was started with by StartChild, or "" in a
// normal test run.
func ChildRole() string { return os.Getenv(ChildRoleEnv) }

// Ready is the line a child prints on stdout once it runs; StartChild waits for it.
const Ready = "CHAOS-CHILD-READY"

// Child is a helper process running the test binary's TestHelperProcess.
type Child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	mu     sync.Mutex
	output strings.Builder
	ready  chan struct{}
}

// StartChild re-executes the test binary with -test.run=^<testName>$ and
// ChildRoleEnv=role plus env, and waits (up to 30 s) until the child prints Ready. The
// child is SIGKILLed at the end of the test and dies with the parent (Pdeathsig); its
// output is logged when the test fails.
func StartChild(t testing.TB, testName, role string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+testName+"$", "-test.v", "-test.timeout=0")
	cmd.Env = append(append(os.Environ(), ChildRoleEnv+"="+role), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	c := &Child{cmd: cmd, done: make(chan struct{}), ready: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			if c.output.Len() < 1<<20 {
				c.output.WriteString(line)
				c.output.WriteByte('\n')
			}
			c.mu.Unlock()
			if strings.Contains(line, Ready) {
				once.Do(func() { close(c.ready) })
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		c.err = cmd.Wait()
		_ = pw.Close()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() {
			t.Logf("child %s output:\n%s", role, c.Output())
		}
	})
	select {
	case <-c.ready:
	case <-c.done:
		t.Fatalf("child %s exited before it was ready: %v\n%s", role, c.err, c.Output())
	case <-time.After(30 * time.Second):
		c.Kill()
		t.Fatalf("child %s not ready after 30s:\n%s", role, c.Output())
	}
	return c
}

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Kill sends SIGKILL (no cleanup runs in the child: a crash) and waits for the exit.
func (c *Child) Kill() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
}

// Exited reports whether the child has exited, and its error.
func (c *Child) Exited() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// Output returns what the child printed so far (first MiB).
func (c *Child) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.output.String()
}

// SignalReady is called by the child once it runs.
func SignalReady() { fmt.Println(Ready) }
