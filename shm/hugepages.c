/* shm/hugepages.c — reading (and setting) the kernel's huge page knobs. */
#include "hugepages.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

long wsync_file_long(const char *path)
{
	char buf[160];
	ssize_t n;
	long v;
	char *end;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	v = strtol(buf, &end, 10);
	return end != buf && v >= 0 ? v : -1;
}

int wsync_file_write(const char *path, const char *s)
{
	size_t len = strlen(s);
	int fd = open(path, O_WRONLY | O_CLOEXEC), saved;
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, s, len);
	saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t)len ? 0 : -1;
}

long wsync_hugetlb_free(void)
{
	return wsync_file_long(WSYNC_HUGETLB_FREE);
}

void wsync_thp_shmem_mode(char *buf, size_t len)
{
	char line[160], *open_br, *close_br;
	ssize_t n;
	int fd = open(WSYNC_THP_SHMEM, O_RDONLY | O_CLOEXEC);

	if (len)
		buf[0] = '\0';
	if (fd < 0)
		return;
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		return;
	line[n] = '\0';
	open_br = strchr(line, '[');
	close_br = open_br ? strchr(open_br, ']') : NULL;
	if (!close_br || (size_t)(close_br - open_br) > len)
		return;
	memcpy(buf, open_br + 1, (size_t)(close_br - open_br - 1));
	buf[close_br - open_br - 1] = '\0';
}

bool wsync_thp_shmem_usable(const char *mode)
{
	return !strcmp(mode, "advise") || !strcmp(mode, "within_size") ||
	       !strcmp(mode, "always") || !strcmp(mode, "force");
}
