package worker

import (
	"os/exec"
	"runtime"
	"sync"
)

// Workers are started with Pdeathsig (they die with the daemon), and
// Linux sends that signal when the *thread* that forked the child exits,
// not the process (prctl(2), PR_SET_PDEATHSIG). Go ends a thread whose
// goroutine exits while locked to it (runtime.LockOSThread), so a worker
// forked from such a goroutine's thread would be killed behind the
// supervisor's back, costing a restart. Every start therefore goes
// through one goroutine locked, for the life of the process, to a thread
// of its own.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

// startCmd is cmd.Start on the spawner's thread.
func startCmd(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd, done}
	return <-done
}
