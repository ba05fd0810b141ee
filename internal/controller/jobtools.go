package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/executor"
	"github.com/toolgate/toolgate/internal/tools"
)

// jobKillRecheck is how often job_kill looks whether the job it stopped has ended:
// the runner kills the job's process group (SIGTERM, SIGKILL after its grace) and
// sweeps what is left; a runner that does not is cut off after sessionStopGrace.
const jobKillRecheck = 200 * time.Millisecond

// jobCommandShown bounds the command job_list shows of each job.
const jobCommandShown = 120

// reconcileJobTool answers a background-job tool (job_output, job_list, job_kill):
// the chain is checked as for any call, then the controller answers from its record
// of the task's jobs (the jobs' Executions, and the live output of the jobs it runs)
// and writes the answer as the call's result. No sandbox runs: the record is what
// the tool reads, and a job is stopped by closing its stream.
func (r *ExecutionReconciler) reconcileJobTool(ctx context.Context, exec *v1.Execution) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var obs executor.Observation
	wait, refused, err := r.authorize(ctx, exec)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case wait > 0:
		return ctrl.Result{RequeueAfter: wait}, nil
	case refused != nil:
		obs.BuildError = refused
	default:
		var later time.Duration
		if obs.Answer, later, err = r.answerJobTool(ctx, exec); err != nil {
			return ctrl.Result{}, err
		}
		if obs.Answer == nil {
			return ctrl.Result{RequeueAfter: later}, nil
		}
	}
	before, conflicted, err := r.writeStatus(ctx, log, exec, obs)
	if err != nil || conflicted || before == nil {
		return conflictRequeue(conflicted), err
	}
	r.recordSteps(log, exec, before, nil, false, refused)
	return ctrl.Result{}, nil
}

// answerJobTool is the answer to exec's job tool, or nil and when to look again
// (job_kill, until the job it stopped ended); an error is the API's.
func (r *ExecutionReconciler) answerJobTool(ctx context.Context, exec *v1.Execution) (*executor.JobToolAnswer, time.Duration, error) {
	answer := &executor.JobToolAnswer{At: r.Now()}
	if exec.Spec.Tool == v1.ToolJobList {
		list, err := r.listJobs(ctx, exec)
		if err != nil {
			return nil, 0, err
		}
		answer.Output = list
		return answer, 0, nil
	}
	job, missing, err := r.namedJob(ctx, exec)
	if err != nil {
		return nil, 0, err
	}
	if missing != "" {
		return failJobTool(answer, missing), 0, nil
	}
	if exec.Spec.Tool == v1.ToolJobOutput {
		answer.Output = r.jobReport(job)
		return answer, 0, nil
	}
	return r.killJob(ctx, exec, job, answer)
}

// failJobTool makes answer a failure that says msg.
func failJobTool(answer *executor.JobToolAnswer, msg string) *executor.JobToolAnswer {
	answer.ExitCode, answer.Message = 1, msg
	answer.Output = answer.Message + "\n"
	return answer
}

// listJobs is job_list's answer: the background jobs of exec's task.
func (r *ExecutionReconciler) listJobs(ctx context.Context, exec *v1.Execution) (string, error) {
	task := exec.Spec.TaskRef.Name
	// From the API server: the cache keeps no finished Execution's input, which
	// tells a job from another call.
	opts := []client.ListOption{client.InNamespace(exec.Namespace)}
	if len(validation.IsValidLabelValue(task)) == 0 {
		opts = append(opts, client.MatchingLabels{v1.LabelTask: task})
	}
	var execs v1.ExecutionList
	if err := r.APIReader.List(ctx, &execs, opts...); err != nil {
		return "", err
	}
	var jobs []v1.Execution
	for i := range execs.Items {
		if e := &execs.Items[i]; tools.IsBackground(e.Spec.Tool, e.Spec.Input.Raw) {
			same, err := r.sameTask(ctx, exec, e)
			if err != nil {
				return "", err
			}
			if same {
				jobs = append(jobs, *e)
			}
		}
	}
	return jobList(jobs, task), nil
}

// namedJob reads the background job exec's input names, from the API server; or
// says why the task has no such job (missing).
func (r *ExecutionReconciler) namedJob(ctx context.Context, exec *v1.Execution) (job *v1.Execution, missing string, err error) {
	task := exec.Spec.TaskRef.Name
	var in tools.JobInput
	if err := json.Unmarshal(exec.Spec.Input.Raw, &in); err != nil || in.Job == "" {
		return nil, fmt.Sprintf("spec.input.job: the input names no job (%v)", err), nil
	}
	job = &v1.Execution{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: in.Job}, job); apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("job %s: AgentTask %s has no background job of that id; job_list lists its jobs", in.Job, task), nil
	} else if err != nil {
		return nil, "", err
	}
	same, err := r.sameTask(ctx, exec, job)
	if err != nil {
		return nil, "", err
	}
	if !same || !tools.IsBackground(job.Spec.Tool, job.Spec.Input.Raw) {
		// Another task's job, or no job at all: the same answer, so that a task
		// learns nothing of what is not its own.
		return nil, fmt.Sprintf("job %s: AgentTask %s has no background job of that id; job_list lists its jobs", in.Job, task), nil
	}
	return job, "", nil
}

// killJob is job_kill's answer: it stops the job, and answers once it ended. What
// this process knows of the job comes first: its record may lag.
func (r *ExecutionReconciler) killJob(ctx context.Context, exec, job *v1.Execution, answer *executor.JobToolAnswer) (*executor.JobToolAnswer, time.Duration, error) {
	by := fmt.Sprintf("ToolIntent %s (job_kill) stopped it", exec.Spec.IntentRef.Name)
	stopped := "job " + job.Name + " was stopped: its whole process tree was killed; job_output " + job.Name + " shows its output until then\n"
	if run, inFlight := r.sessions.run(job.UID); inFlight {
		r.sessions.stop(job.UID, by)
		return nil, jobKillRecheck, nil
	} else if run != nil {
		if r.sessions.stoppedBy(job.UID) == by {
			answer.Output = stopped
		} else {
			answer.Output = "job " + job.Name + " had already ended, nothing was stopped; job_output " + job.Name + " shows how it ended\n"
		}
		return answer, 0, nil
	}
	// Not in this process's memory: its record says, read again now.
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
		return nil, 0, client.IgnoreNotFound(err)
	}
	switch {
	case executor.IsFinished(&job.Status) && job.Status.Background != nil && job.Status.Background.StoppedBy == by:
		answer.Output = stopped
	case executor.IsFinished(&job.Status):
		answer.Output = "job " + job.Name + " had already ended, nothing was stopped:\n" + r.jobReport(job)
	case job.Status.SessionName == "":
		// Not delivered yet (its session is starting): it never will be.
		r.sessions.stop(job.UID, by)
		answer.Output = "job " + job.Name + " had not started yet; it will not start\n"
	default:
		return failJobTool(answer, fmt.Sprintf("job %s is not running in this controller: it was started by a controller that is gone (its stream closed, which stopped it); job_output shows its state", job.Name)), 0, nil
	}
	return answer, 0, nil
}

// sameTask says whether job was decided for the very task exec was (its UID, as
// both decisions recorded it): a task re-created under the same name is another
// task, and its jobs are not the new one's.
func (r *ExecutionReconciler) sameTask(ctx context.Context, exec, job *v1.Execution) (bool, error) {
	if job.Spec.TaskRef.Name != exec.Spec.TaskRef.Name {
		return false, nil
	}
	uids := make([]string, 0, 2)
	for _, name := range []string{exec.Spec.IntentRef.Name, job.Spec.IntentRef.Name} {
		intent := &v1.ToolIntent{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: exec.Namespace, Name: name}, intent); apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		d := intent.Status.Decision
		if d == nil || d.Sandbox == nil || d.Sandbox.TaskUID == "" {
			return false, nil
		}
		uids = append(uids, d.Sandbox.TaskUID)
	}
	return uids[0] == uids[1], nil
}

// jobReport is what job_output shows of a job: its state, then its output (head
// and tail within its own cap): the recorded output once it ended, else what its
// stream brought so far.
func (r *ExecutionReconciler) jobReport(job *v1.Execution) string {
	var b strings.Builder
	st := job.Status
	switch {
	case executor.IsFinished(&st):
		fmt.Fprintf(&b, "[job %s: ended, %s]\n", job.Name, endedAs(&st))
		b.WriteString(st.Output)
		if st.Output != "" && !strings.HasSuffix(st.Output, "\n") {
			b.WriteString("\n")
		}
		if st.Truncated {
			fmt.Fprintf(&b, "[output truncated: %d bytes in all, only the head and tail are shown]\n", st.StdoutBytes+st.StderrBytes)
		}
	case runEnded(r.sessions, job.UID):
		run, _ := r.sessions.run(job.UID)
		output, _ := executor.ComposeOutput(executor.SessionLog(run.Output, int64(len(run.Output)), job.Spec.MaxOutputBytes), job.Spec.MaxOutputBytes)
		fmt.Fprintf(&b, "[job %s: ended a moment ago; its record is being written: job_output shows how it ended in a moment]\n%s", job.Name, output)
	case r.sessions.job(job.UID) != nil:
		live := r.sessions.job(job.UID)
		kept, total := live.snapshot()
		output, cut := executor.ComposeOutput(executor.SessionLog(kept, total, job.Spec.MaxOutputBytes), job.Spec.MaxOutputBytes)
		fmt.Fprintf(&b, "[job %s: running since %s, %d bytes of output so far]\n", job.Name, live.startedAt().UTC().Format(time.RFC3339), total)
		b.WriteString(output)
		if output != "" && !strings.HasSuffix(output, "\n") {
			b.WriteString("\n")
		}
		if cut {
			b.WriteString("[output truncated: only the head and tail are shown]\n")
		}
	case st.SessionName != "":
		fmt.Fprintf(&b, "[job %s: its result is lost: it was started by a controller that is gone, whose stream's end stopped it; it ends as an Exception]\n", job.Name)
	default:
		fmt.Fprintf(&b, "[job %s: not started yet: %s]\n", job.Name, orDash(st.Message))
	}
	return b.String()
}

// runEnded says whether this process holds the job's finished run, not recorded
// yet.
func runEnded(s *sessionCalls, uid types.UID) bool {
	run, _ := s.run(uid)
	return run != nil
}

// endedAs says how a finished job ended.
func endedAs(st *v1.ExecutionStatus) string {
	how := "exit code none"
	if st.ExitCode != nil {
		how = fmt.Sprintf("exit code %d", *st.ExitCode)
	}
	if st.ErrorKind != "" && st.ErrorKind != v1.ErrorExitCode {
		how += fmt.Sprintf(" (%s: %s)", st.ErrorKind, st.Message)
	}
	return how
}

// jobList is job_list's answer: the task's background jobs, oldest first.
func jobList(execs []v1.Execution, task string) string {
	var jobs []*v1.Execution
	for i := range execs {
		if e := &execs[i]; e.Spec.TaskRef.Name == task && tools.IsBackground(e.Spec.Tool, e.Spec.Input.Raw) {
			jobs = append(jobs, e)
		}
	}
	if len(jobs) == 0 {
		return "AgentTask " + task + " has no background jobs.\n"
	}
	sort.Slice(jobs, func(i, j int) bool {
		a, b := jobs[i].CreationTimestamp, jobs[j].CreationTimestamp
		return a.Before(&b) || (a.Equal(&b) && jobs[i].Name < jobs[j].Name)
	})
	var b strings.Builder
	for _, job := range jobs {
		state := "running"
		switch {
		case executor.IsFinished(&job.Status):
			state = "ended, " + endedAs(&job.Status)
		case job.Status.Background == nil:
			state = "starting"
		}
		var in tools.BashInput
		_ = json.Unmarshal(job.Spec.Input.Raw, &in)
		command := strings.Join(strings.Fields(in.Command), " ")
		if r := []rune(command); len(r) > jobCommandShown {
			command = string(r[:jobCommandShown]) + "…"
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\n", job.Name, state, command)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
