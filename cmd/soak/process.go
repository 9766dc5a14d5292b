package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// restartAfterExit is the pause before a process that exited on its own is started again (it
// may be failing to start because RabbitMQ or PostgreSQL is down).
const restartAfterExit = 500 * time.Millisecond

var errStopping = errors.New("the process is being stopped")

// process is one process of the ledger binary (a `ledger serve` of some roles, or a `ledger sink`
// provider fake), kept running by a supervisor goroutine: it is restarted after every SIGKILL
// the chaos sends and after every exit of its own, unless it was killed for good.
type process struct {
	name    string
	args    []string
	env     []string
	logPath string
	binary  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	running bool
	// killPause, when set, marks the current process as killed by the chaos: the supervisor
	// waits this long before starting it again.
	killPause time.Duration
	stopping  bool
	starts    int
	kills     int
	// exits counts exits the soak did not cause (a crash, a failed start).
	exits    int
	lastExit string
	// events are the starts and exits of the process, for the timeline of a failed run.
	events []incident
	done   chan struct{}
}

// newProcess prepares a process that runs binary with args, logging to dir/name.log.
func newProcess(binary, dir, name string, args, env []string) *process {
	return &process{
		name:    name,
		binary:  binary,
		args:    args,
		env:     env,
		logPath: filepath.Join(dir, name+".log"),
		done:    make(chan struct{}),
	}
}

// supervise runs the process until stop is called.
func (p *process) supervise(ctx context.Context) {
	defer close(p.done)
	for {
		cmd, err := p.start()
		if errors.Is(err, errStopping) {
			return
		}
		if err != nil {
			p.mu.Lock()
			p.exits++
			p.lastExit = err.Error()
			p.mu.Unlock()
			if p.sleep(ctx, restartAfterExit) {
				return
			}
			continue
		}
		werr := cmd.Wait()
		p.mu.Lock()
		p.running = false
		stopping, pause := p.stopping, p.killPause
		p.killPause = 0
		if !stopping && pause == 0 {
			p.exits++
			p.lastExit = fmt.Sprint(werr)
			pause = restartAfterExit
			p.events = append(p.events, incident{At: time.Now(), Kind: "exit", Target: p.name, Detail: p.lastExit})
		}
		p.mu.Unlock()
		if stopping || p.sleep(ctx, pause) {
			return
		}
	}
}

// sleep waits d; it reports true when the process is being stopped meanwhile.
func (p *process) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping || ctx.Err() != nil
}

func (p *process) start() (*exec.Cmd, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return nil, errStopping
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	p.starts++
	fmt.Fprintf(log, "=== soak: start #%d at %s\n", p.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.binary, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a Ctrl-C at the terminal reaches only the soak, which stops
	// the processes itself; and killed with the soak if the soak dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.running = cmd, true
	p.events = append(p.events, incident{At: time.Now(), Kind: "start", Target: p.name, Detail: fmt.Sprintf("pid %d", cmd.Process.Pid)})
	return cmd, nil
}

// kill sends SIGKILL to the running process and has it restarted after pause. It reports
// false when the process was not running.
func (p *process) kill(pause time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running || p.stopping || p.killPause != 0 {
		return false
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return false
	}
	p.killPause = max(pause, time.Millisecond)
	p.kills++
	return true
}

// killForGood sends SIGKILL to the running process and does not start it again. It reports
// false when the process was not running.
func (p *process) killForGood() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running || p.stopping || p.killPause != 0 {
		return false
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return false
	}
	p.stopping = true // the supervisor returns once the process is gone
	p.kills++
	return true
}

// isRunning reports whether the process is up (and not already killed).
func (p *process) isRunning() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running && p.killPause == 0
}

// stop sends SIGTERM and waits for the process to finish its graceful shutdown; after grace it
// sends SIGKILL.
func (p *process) stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	if p.running {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	cmd := p.cmd
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-time.After(grace):
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
		<-p.done
	}
}

// counts returns the process's starts, kills and unexpected exits.
func (p *process) counts() (starts, kills, exits int, lastExit string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts, p.kills, p.exits, p.lastExit
}

// timeline returns the starts and exits of the process.
func (p *process) timeline() []incident {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]incident(nil), p.events...)
}

// tail writes the last n lines of the process's log.
func (p *process) tail(w io.Writer, n int) {
	f, err := os.Open(p.logPath)
	if err != nil {
		fmt.Fprintf(w, "  (no log: %v)\n", err)
		return
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = lines[len(lines)-n:]
		}
	}
	if len(lines) > n {
		fmt.Fprintf(w, "  ... (%s)\n", p.logPath)
		lines = lines[len(lines)-n:]
	}
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}
