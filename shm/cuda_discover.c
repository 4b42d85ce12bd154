/* shm/cuda_discover.c — GPU discovery through a loaded driver; see cuda_discover.h. */
#include "cuda_discover.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void wsync_gpu_uuid_format(const uint8_t u[16], char *buf, size_t len)
{
	snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
	         "%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7],
	         u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)tolower((unsigned char)c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int wsync_gpu_uuid_parse(const char *s, uint8_t out[16])
{
	static const int dash_after[] = { 4, 6, 8, 10 };   /* bytes before each '-' */
	size_t d = 0;

	if (!s)
		return -EINVAL;
	if (!strncasecmp(s, "GPU-", 4))
		s += 4;
	for (int i = 0; i < 16; i++) {
		int hi, lo;

		if (d < 4 && i == dash_after[d]) {
			if (*s++ != '-')
				return -EINVAL;
			d++;
		}
		hi = hex_digit(s[0]);
		lo = hi < 0 ? -1 : hex_digit(s[1]);
		if (lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
		s += 2;
	}
	return *s ? -EINVAL : 0;
}

int wsync_gpu_find(const struct wsync_gpu_inventory *inv, const char *s)
{
	const char *text = s;
	char *end;
	long v;

	if (!s || !*s)
		return -1;
	if (isdigit((unsigned char)s[0])) {
		v = strtol(s, &end, 10);
		return *end || v < 0 || v >= inv->count ? -1 : (int)v;
	}
	for (int i = 0; i < inv->count; i++) {
		const char *u = inv->dev[i].uuid_text;

		if (!strncasecmp(text, "GPU-", 4) ? !strcasecmp(text, u) : !strcasecmp(text, u + 4))
			return i;
	}
	return -1;
}

void wsync_gpu_peers_text(const struct wsync_gpu_inventory *inv, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (int a = 0; a < inv->count; a++)
		for (int b = 0; b < inv->count; b++) {
			int n;

			if (!inv->peer[a][b])
				continue;
			n = snprintf(buf + at, len - at, "%s%d>%d", at ? " " : "", a, b);
			if (n < 0 || (size_t)n >= len - at)
				return;
			at += (size_t)n;
		}
	if (!at)
		snprintf(buf, len, "none");
}

#ifdef WSYNC_HAVE_CUDA_H
static int attr(const struct wsync_cuda *cu, CUdevice dev, CUdevice_attribute a)
{
	int v = 0;

	return cu->api.cu_cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
}

static CUresult device_describe(const struct wsync_cuda *cu, int ordinal,
                                struct wsync_gpu_info *g)
{
	CUmemAllocationProp prop;
	CUdevice dev;
	CUuuid uuid;
	CUresult r;

	memset(g, 0, sizeof(*g));
	g->ordinal = ordinal;
	r = cu->api.cu_cuDeviceGet(&dev, ordinal);
	if (!r)
		r = cu->api.cu_cuDeviceGetName(g->name, (int)sizeof(g->name), dev);
	if (!r)
		r = cu->api.cu_cuDeviceGetUuid(&uuid, dev);
	if (r)
		return r;
	memcpy(g->uuid, uuid.bytes, sizeof(g->uuid));
	wsync_gpu_uuid_format(g->uuid, g->uuid_text, sizeof(g->uuid_text));
	if (cu->api.cu_cuDeviceTotalMem(&g->total_mem, dev) != CUDA_SUCCESS)
		g->total_mem = 0;
	g->vmm = attr(cu, dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
	g->posix_fd = g->vmm &&
	              attr(cu, dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
	g->pci_domain = attr(cu, dev, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
	g->pci_bus = attr(cu, dev, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
	g->pci_device = attr(cu, dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
	if (g->posix_fd) {
		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = dev;
		if (cu->api.cu_cuMemGetAllocationGranularity(&g->granularity, &prop,
		                                            CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
			g->granularity = 0;
	}
	return CUDA_SUCCESS;
}

int wsync_cuda_discover(const struct wsync_cuda *cu, struct wsync_gpu_inventory *inv,
                        char *why, size_t whylen)
{
	const char *name = NULL;
	CUresult r = CUDA_SUCCESS;
	int i;

	memset(inv, 0, sizeof(*inv));
	inv->driver_version = cu->driver_version;
	inv->count_all = cu->device_count;
	inv->count = cu->device_count < WSYNC_GPU_MAX ? cu->device_count : WSYNC_GPU_MAX;
	for (i = 0; i < inv->count && !r; i++)
		r = device_describe(cu, i, &inv->dev[i]);
	for (int a = 0; a < inv->count && !r; a++)
		for (int b = 0; b < inv->count && !r; b++) {
			int can = 0;

			if (a != b)
				r = cu->api.cu_cuDeviceCanAccessPeer(&can, a, b);
			inv->peer[a][b] = can != 0;
		}
	if (r) {
		cu->api.cu_cuGetErrorName(r, &name);
		snprintf(why, whylen, "CUDA driver %s: describing the GPUs failed: %s",
		         cu->path, name ? name : "unknown error");
		memset(inv, 0, sizeof(*inv));
		return -EIO;
	}
	return 0;
}
#else
int wsync_cuda_discover(const struct wsync_cuda *cu, struct wsync_gpu_inventory *inv,
                        char *why, size_t whylen)
{
	(void)cu;
	memset(inv, 0, sizeof(*inv));
	snprintf(why, whylen, "built without the CUDA Toolkit headers (cuda.h); "
	         "GPU support is compiled out");
	return -ENOSYS;
}
#endif
