/*
 * tools/demo/child.c — the driver's child processes: fork and exec with an
 * exec-failure pipe, their exit status, and the lines they write.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "demo.h"

struct spawn_fds {
	int out, err;           /* become stdout and (if >= 0) stderr */
	int ack;                /* write end of the exec-failure pipe */
};

/* In the forked child: own process group, SIGTERM when the driver dies,
 * default signal state, redirections, exec. On failure, sends errno
 * through the ack pipe (closed by exec on success). */
static _Noreturn void child_exec(char *const argv[], const struct spawn_fds *f,
                                 pid_t parent)
{
	sigset_t none;
	int err;

	sigemptyset(&none);
	setpgid(0, 0);
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) == 0 && getppid() != parent)
		_exit(127);
	signal(SIGPIPE, SIG_DFL);
	if (sigprocmask(SIG_SETMASK, &none, NULL) == 0 &&
	    dup2(f->out, STDOUT_FILENO) >= 0 &&
	    (f->err < 0 || dup2(f->err, STDERR_FILENO) >= 0)) {
		if (strchr(argv[0], '/'))
			execv(argv[0], argv);
		else
			execvp(argv[0], argv);
	}
	err = errno;
	if (write(f->ack, &err, sizeof err) < 0) {
		/* the driver sees an exit status of 127 instead */
	}
	_exit(127);
}

/* 0 once the child has exec'ed, or the errno of its failed exec. */
static int child_exec_result(int ack_fd)
{
	int err = 0;
	ssize_t n;

	do
		n = read(ack_fd, &err, sizeof err);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof err ? err : 0;
}

int child_spawn(struct child *ch, char *const argv[], const char *log_path)
{
	int pipe_fds[2] = { -1, -1 }, ack[2], log_fd = -1, err;
	struct spawn_fds f;
	pid_t parent = getpid(), pid;

	if (log_path) {
		log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (log_fd < 0)
			return -errno;
	} else if (pipe2(pipe_fds, O_CLOEXEC)) {
		return -errno;
	}
	if (pipe2(ack, O_CLOEXEC)) {
		err = -errno;
		goto out_close;
	}
	f = (struct spawn_fds){ .out = log_path ? log_fd : pipe_fds[1], .err = log_fd,
	                        .ack = ack[1] };
	pid = fork();
	if (pid == 0)
		child_exec(argv, &f, parent);
	err = pid < 0 ? -errno : 0;
	close(ack[1]);
	if (pid > 0) {
		err = -child_exec_result(ack[0]);
		if (err)
			waitpid(pid, NULL, 0);
	}
	close(ack[0]);
	if (!err) {
		ch->pid = pid;
		ch->running = true;
		ch->out_fd = pipe_fds[0];
		pipe_fds[0] = -1;
	}
out_close:
	if (log_fd >= 0)
		close(log_fd);
	if (pipe_fds[0] >= 0)
		close(pipe_fds[0]);
	if (pipe_fds[1] >= 0)
		close(pipe_fds[1]);
	return err;
}

void child_describe_status(const struct child *ch, char *buf, size_t len)
{
	if (!ch->pid)
		snprintf(buf, len, "not started");
	else if (ch->running)
		snprintf(buf, len, "still running");
	else if (WIFEXITED(ch->status))
		snprintf(buf, len, "exit %d", WEXITSTATUS(ch->status));
	else if (WIFSIGNALED(ch->status) && sigabbrev_np(WTERMSIG(ch->status)))
		snprintf(buf, len, "killed by SIG%s", sigabbrev_np(WTERMSIG(ch->status)));
	else if (WIFSIGNALED(ch->status))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(ch->status));
	else
		snprintf(buf, len, "wait status %#x", ch->status);
}

bool child_exited_cleanly(const struct child *ch)
{
	return ch->pid && !ch->running && WIFEXITED(ch->status) &&
	       WEXITSTATUS(ch->status) == 0;
}

/* A line from a child: its result, or progress to echo. */
static void child_handle_line(struct child *ch, const char *line)
{
	if (strncmp(line, "result ", 7)) {
		printf("[%s] %s\n", ch->label, line);
		return;
	}
	if (ch->kind == CHILD_TRAINER)
		ch->has_result = result_parse_trainer(line, &ch->res.trainer) == 0;
	else if (ch->kind == CHILD_COLLECTOR)
		ch->has_result = result_parse_collector(line, &ch->res.collector) == 0;
	if (!ch->has_result)
		say_error("%s: unreadable result line: %s", ch->label, line);
}

void child_read_output(struct child *ch)
{
	char buf[4096];
	ssize_t n = read(ch->out_fd, buf, sizeof buf);

	if (n < 0 && errno == EINTR)
		return;
	for (ssize_t i = 0; i < n; i++) {
		if (buf[i] != '\n' && ch->line_len < sizeof ch->line - 1) {
			ch->line[ch->line_len++] = buf[i];
			continue;
		}
		ch->line[ch->line_len] = '\0';
		child_handle_line(ch, ch->line);
		ch->line_len = 0;
		if (buf[i] != '\n')
			ch->line[ch->line_len++] = buf[i];
	}
	if (n <= 0) {
		if (ch->line_len) {
			ch->line[ch->line_len] = '\0';
			child_handle_line(ch, ch->line);
			ch->line_len = 0;
		}
		close(ch->out_fd);
		ch->out_fd = -1;
	}
}
