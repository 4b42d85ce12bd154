/*
 * tests/fakecuda/fakecuda.c — the fake driver's configuration, devices,
 * primary contexts, error names, failure injection and cuGetProcAddress_v2.
 *
 * Only versioned names are exported for functions whose ABI changed
 * (cuMemcpyDtoDAsync_v2, cuMemAlloc_v2, ...): a loader that dlsym()s the
 * legacy name finds nothing here, where the real driver would hand it the
 * 32-bit legacy entry. cuDeviceGetUuid is the one legacy name exported: its
 * _v2 has the same signature (it differs only for MIG instances).
 */
#include "fc_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

pthread_mutex_t  fc_lock = PTHREAD_MUTEX_INITIALIZER;
struct fc_config fc_cfg;
bool             fc_initialised;
static bool      fc_configured;        /* the environment was read */
struct CUctx_st  fc_primary[FAKECUDA_MAX_DEVICES];
__thread CUcontext fc_current;

/* ---- failure injection ------------------------------------------------ */

#define FC_MAX_SPECS 16

struct fc_spec {
	char     name[64];
	unsigned nth, calls;
	CUresult err;
	bool     die;
};

static struct fc_spec fc_specs[FC_MAX_SPECS];
static int            fc_n_specs;

/* ---- call counts (fakecuda_calls) ------------------------------------ */

#define FC_MAX_COUNTED 96

static struct { const char *name; uint64_t n; } fc_counts[FC_MAX_COUNTED];
static int fc_n_counted;

/* fc_lock held; names are the literals the entry points pass */
static void call_count(const char *name)
{
	for (int i = 0; i < fc_n_counted; i++)
		if (!strcmp(fc_counts[i].name, name)) {
			fc_counts[i].n++;
			return;
		}
	if (fc_n_counted < FC_MAX_COUNTED) {
		fc_counts[fc_n_counted].name = name;
		fc_counts[fc_n_counted++].n = 1;
	}
}

uint64_t fakecuda_calls(const char *name)
{
	uint64_t n = 0;

	pthread_mutex_lock(&fc_lock);
	for (int i = 0; name && i < fc_n_counted; i++)
		if (!strcmp(fc_counts[i].name, name))
			n = fc_counts[i].n;
	pthread_mutex_unlock(&fc_lock);
	return n;
}

/* "name:N[:err],name:N" -> fc_specs */
static void specs_parse(const char *env, bool die)
{
	char buf[512], *save = NULL, *tok;

	if (!env)
		return;
	snprintf(buf, sizeof(buf), "%s", env);
	for (tok = strtok_r(buf, ",", &save); tok && fc_n_specs < FC_MAX_SPECS;
	     tok = strtok_r(NULL, ",", &save)) {
		struct fc_spec *s = &fc_specs[fc_n_specs];
		char *c1 = strchr(tok, ':'), *c2;

		if (!c1)
			continue;
		*c1++ = '\0';
		c2 = strchr(c1, ':');
		if (c2)
			*c2++ = '\0';
		memset(s, 0, sizeof(*s));
		snprintf(s->name, sizeof(s->name), "%s", tok);
		s->nth = (unsigned)strtoul(c1, NULL, 10);
		s->err = c2 ? (CUresult)strtoul(c2, NULL, 10) : CUDA_ERROR_UNKNOWN;
		s->die = die;
		if (s->nth)
			fc_n_specs++;
	}
}

static void config_read(void);

CUresult fc_enter(const char *name, bool need_init)
{
	CUresult r = CUDA_SUCCESS;
	bool die = false;

	pthread_mutex_lock(&fc_lock);
	if (!fc_configured)
		config_read();            /* on the first call, cuInit or not */
	call_count(name);
	for (int i = 0; i < fc_n_specs; i++) {
		struct fc_spec *s = &fc_specs[i];

		if (strcmp(s->name, name) || ++s->calls != s->nth)
			continue;
		if (s->die)
			die = true;
		else
			r = s->err;
	}
	if (!r && need_init && !fc_initialised)
		r = CUDA_ERROR_NOT_INITIALIZED;
	pthread_mutex_unlock(&fc_lock);
	if (die) {
		fprintf(stderr, "fakecuda: FAKECUDA_DIE: %s\n", name);
		raise(SIGKILL);
	}
	return r;
}

/* ---- configuration ---------------------------------------------------- */

static unsigned long env_ul(const char *name, unsigned long def)
{
	const char *v = getenv(name);

	return v && *v ? strtoul(v, NULL, 10) : def;
}

static bool env_flag(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0;
}

static void peers_parse(const char *env)
{
	bool all = !env || !*env || !strcmp(env, "all");

	for (int i = 0; i < FAKECUDA_MAX_DEVICES; i++)
		for (int j = 0; j < FAKECUDA_MAX_DEVICES; j++)
			fc_cfg.peer[i][j] = all && i != j;
	if (all || !strcmp(env, "none"))
		return;
	for (const char *p = env; p[0] && p[1]; ) {
		int a = p[0] - '0', b = p[1] - '0';

		if (a >= 0 && a < FAKECUDA_MAX_DEVICES && b >= 0 && b < FAKECUDA_MAX_DEVICES && a != b)
			fc_cfg.peer[a][b] = true;
		p += 2;
		while (*p == ',' || *p == ' ')
			p++;
	}
}

static void uuid_of_phys(int phys, unsigned char out[16])
{
	uint64_t x = 0xfacec0da00000000ull ^ ((uint64_t)phys << 40);

	for (int half = 0; half < 2; half++) {
		uint64_t z;

		x += 0x9e3779b97f4a7c15ull;           /* splitmix64 */
		z = x;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(out + 8 * half, &z, 8);
	}
}

/* "GPU-8e1f..." prefix of a physical device's UUID in text form? */
static int phys_of_uuid_prefix(const char *s, size_t len)
{
	int found = -1;

	for (int i = 0; i < fc_cfg.n_phys; i++) {
		unsigned char u[16];
		char text[64];

		uuid_of_phys(i, u);
		snprintf(text, sizeof(text), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		         "%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4], u[5], u[6],
		         u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
		if (len > 4 && len <= strlen(text) && !strncasecmp(text, s, len)) {
			if (found >= 0)
				return -1;            /* ambiguous */
			found = i;
		}
	}
	return found;
}

/* As the driver does: a comma-separated list of indices or UUID prefixes;
 * the list stops at the first invalid or repeated entry. */
static void visible_parse(const char *env)
{
	bool used[FAKECUDA_MAX_DEVICES] = { false };

	fc_cfg.n_vis = 0;
	if (!env) {
		for (int i = 0; i < fc_cfg.n_phys; i++)
			fc_cfg.vis[fc_cfg.n_vis++] = i;
		return;
	}
	for (const char *p = env; *p; ) {
		size_t len = strcspn(p, ",");
		int phys = -1;
		char *end;

		while (len && p[0] == ' ')
			p++, len--;
		if (len >= 4 && !strncasecmp(p, "GPU-", 4)) {
			phys = phys_of_uuid_prefix(p, len);
		} else if (len) {
			long v = strtol(p, &end, 10);

			if ((size_t)(end - p) == len && v >= 0 && v < fc_cfg.n_phys)
				phys = (int)v;
		}
		if (phys < 0 || used[phys])
			break;
		used[phys] = true;
		fc_cfg.vis[fc_cfg.n_vis++] = phys;
		p += len;
		if (*p == ',')
			p++;
	}
}

static void config_read(void)
{
	memset(&fc_cfg, 0, sizeof(fc_cfg));
	fc_cfg.n_phys = (int)env_ul("FAKECUDA_DEVICES", 2);
	if (fc_cfg.n_phys > FAKECUDA_MAX_DEVICES)
		fc_cfg.n_phys = FAKECUDA_MAX_DEVICES;
	fc_cfg.driver_version = (int)env_ul("FAKECUDA_DRIVER_VERSION", 12040);
	fc_cfg.mem_budget = (uint64_t)env_ul("FAKECUDA_MEM_MB", 1024) << 20;
	fc_cfg.no_vmm = env_flag("FAKECUDA_NO_VMM");
	fc_cfg.no_fd = env_flag("FAKECUDA_NO_FD");
	fc_cfg.copy_delay_us = (unsigned)env_ul("FAKECUDA_COPY_DELAY_US", 0);
	peers_parse(getenv("FAKECUDA_PEERS"));
	visible_parse(getenv("CUDA_VISIBLE_DEVICES"));
	fc_n_specs = 0;
	specs_parse(getenv("FAKECUDA_FAIL"), false);
	specs_parse(getenv("FAKECUDA_DIE"), true);
	fc_configured = true;
}

bool fc_dev_valid(CUdevice dev)
{
	return dev >= 0 && dev < fc_cfg.n_vis;
}

int fc_phys(CUdevice dev)
{
	return fc_cfg.vis[dev];
}

int fc_vis_of_phys(int phys)
{
	for (int i = 0; i < fc_cfg.n_vis; i++)
		if (fc_cfg.vis[i] == phys)
			return i;
	return -1;
}

CUresult fc_need_ctx(void)
{
	return fc_current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- initialisation, version, devices --------------------------------- */

CUresult cuInit(unsigned int flags)
{
	CUresult r = fc_enter("cuInit", false);

	if (r)
		return r;
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fc_lock);
	fc_initialised = true;
	pthread_mutex_unlock(&fc_lock);
	return fc_cfg.n_vis ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;   /* as the driver does */
}

CUresult cuDriverGetVersion(int *version)
{
	CUresult r = fc_enter("cuDriverGetVersion", false);

	if (r)
		return r;
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = fc_cfg.driver_version;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
	FC_ENTER("cuDeviceGetCount");
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = fc_cfg.n_vis;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	FC_ENTER("cuDeviceGet");
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	FC_ENTER("cuDeviceGetName");
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "Fake CUDA Device %d", fc_phys(dev));
	return CUDA_SUCCESS;
}

static CUresult device_uuid(const char *fn, CUuuid *uuid, CUdevice dev)
{
	unsigned char u[16];

	FC_ENTER(fn);
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	uuid_of_phys(fc_phys(dev), u);
	memcpy(uuid->bytes, u, sizeof(uuid->bytes));
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	return device_uuid("cuDeviceGetUuid_v2", uuid, dev);
}

/* The legacy entry, same signature; cuda.h renames cuDeviceGetUuid. */
#undef cuDeviceGetUuid
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	return device_uuid("cuDeviceGetUuid", uuid, dev);
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	FC_ENTER("cuDeviceGetAttribute");
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
		*pi = !fc_cfg.no_vmm;
		break;
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
		*pi = !fc_cfg.no_vmm && !fc_cfg.no_fd;
		break;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
		*pi = 0x17 + 0x10 * fc_phys(dev);
		break;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
		*pi = 0;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		*pi = 9;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		*pi = 0;
		break;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
		*pi = 1;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
		*pi = INT32_MAX;                     /* what current GPUs report */
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;     /* not simulated: say so */
	}
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	FC_ENTER("cuDeviceTotalMem_v2");
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = (size_t)fc_cfg.mem_budget;
	return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	FC_ENTER("cuDeviceCanAccessPeer");
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(dev) || !fc_dev_valid(peer))
		return CUDA_ERROR_INVALID_DEVICE;
	*can = dev != peer && fc_cfg.peer[fc_phys(dev)][fc_phys(peer)];
	return CUDA_SUCCESS;
}

/* ---- primary contexts ------------------------------------------------- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	FC_ENTER("cuDevicePrimaryCtxRetain");
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&fc_lock);
	fc_primary[dev].dev = dev;
	fc_primary[dev].retains++;
	pthread_mutex_unlock(&fc_lock);
	*pctx = &fc_primary[dev];
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult r = CUDA_SUCCESS;

	FC_ENTER("cuDevicePrimaryCtxRelease_v2");
	if (!fc_dev_valid(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&fc_lock);
	if (fc_primary[dev].retains == 0)
		r = CUDA_ERROR_INVALID_CONTEXT;
	else
		fc_primary[dev].retains--;
	pthread_mutex_unlock(&fc_lock);
	return r;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
	bool ok;

	FC_ENTER("cuCtxSetCurrent");
	if (ctx) {
		pthread_mutex_lock(&fc_lock);
		ok = ctx >= &fc_primary[0] && ctx < &fc_primary[FAKECUDA_MAX_DEVICES] &&
		     ctx->retains > 0;
		pthread_mutex_unlock(&fc_lock);
		if (!ok)
			return CUDA_ERROR_INVALID_CONTEXT;
	}
	fc_current = ctx;
	return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	FC_ENTER("cuCtxGetCurrent");
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = fc_current;
	return CUDA_SUCCESS;
}

/* ---- errors ----------------------------------------------------------- */

static const struct { CUresult r; const char *name, *text; } fc_errors[] = {
	{ CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
	{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
	{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
	{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
	{ CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
	{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
	{ CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
	{ CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
	{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready" },
	{ CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
	{ CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	  "part or all of the requested memory range is already mapped" },
	{ CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	  "pointer does not correspond to a registered memory region" },
	{ CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
	  "an illegal memory access was encountered" },
	{ CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

static int error_find(CUresult r)
{
	for (size_t i = 0; i < sizeof(fc_errors) / sizeof(fc_errors[0]); i++)
		if (fc_errors[i].r == r)
			return (int)i;
	return -1;
}

CUresult cuGetErrorString(CUresult error, const char **str)
{
	int i = error_find(error);

	if (!str)
		return CUDA_ERROR_INVALID_VALUE;
	*str = i < 0 ? NULL : fc_errors[i].text;
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **str)
{
	int i = error_find(error);

	if (!str)
		return CUDA_ERROR_INVALID_VALUE;
	*str = i < 0 ? NULL : fc_errors[i].name;
	return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- cuGetProcAddress_v2 ------------------------------------------------ */

#define FC_PROC(base, ver, fn) { base, ver, (void *)(fn) }

static const struct fc_proc { const char *base; int version; void *fn; } fc_procs[] = {
	FC_PROC("cuInit", 2000, cuInit),
	FC_PROC("cuDriverGetVersion", 2020, cuDriverGetVersion),
	FC_PROC("cuDeviceGetCount", 2000, cuDeviceGetCount),
	FC_PROC("cuDeviceGet", 2000, cuDeviceGet),
	FC_PROC("cuDeviceGetName", 2000, cuDeviceGetName),
	FC_PROC("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
	FC_PROC("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
	FC_PROC("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
	FC_PROC("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
	FC_PROC("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
	FC_PROC("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
	FC_PROC("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
	FC_PROC("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
	FC_PROC("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
	FC_PROC("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
	FC_PROC("cuMemCreate", 10020, cuMemCreate),
	FC_PROC("cuMemRelease", 10020, cuMemRelease),
	FC_PROC("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
	FC_PROC("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
	FC_PROC("cuMemAddressReserve", 10020, cuMemAddressReserve),
	FC_PROC("cuMemAddressFree", 10020, cuMemAddressFree),
	FC_PROC("cuMemMap", 10020, cuMemMap),
	FC_PROC("cuMemUnmap", 10020, cuMemUnmap),
	FC_PROC("cuMemSetAccess", 10020, cuMemSetAccess),
	FC_PROC("cuMemAlloc", 3020, cuMemAlloc_v2),
	FC_PROC("cuMemFree", 3020, cuMemFree_v2),
	FC_PROC("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
	FC_PROC("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
	FC_PROC("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
	FC_PROC("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2),
	FC_PROC("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
	FC_PROC("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2),
	FC_PROC("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2),
	FC_PROC("cuMemcpyPeerAsync", 4000, cuMemcpyPeerAsync),
	FC_PROC("cuStreamCreate", 2000, cuStreamCreate),
	FC_PROC("cuStreamDestroy", 4000, cuStreamDestroy_v2),
	FC_PROC("cuStreamSynchronize", 2000, cuStreamSynchronize),
	FC_PROC("cuStreamQuery", 2000, cuStreamQuery),
	FC_PROC("cuEventCreate", 2000, cuEventCreate),
	FC_PROC("cuEventRecord", 2000, cuEventRecord),
	FC_PROC("cuEventSynchronize", 2000, cuEventSynchronize),
	FC_PROC("cuEventQuery", 2000, cuEventQuery),
	FC_PROC("cuEventDestroy", 4000, cuEventDestroy_v2),
	FC_PROC("cuMemHostRegister", 6050, cuMemHostRegister_v2),
	FC_PROC("cuMemHostUnregister", 4000, cuMemHostUnregister),
	FC_PROC("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
	FC_PROC("cuGetErrorString", 6000, cuGetErrorString),
	FC_PROC("cuGetErrorName", 6000, cuGetErrorName),
	FC_PROC("cuGetProcAddress", 12000, cuGetProcAddress_v2),
};

/*
 * The newest entry of a base name ("cuMemcpyDtoDAsync", no suffix) that a
 * program built for cudaVersion may call. Stricter than the driver: a
 * cudaVersion above the driver's own is refused, so a loader that passes
 * its toolkit's CUDA_VERSION to an older driver fails here.
 */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                             cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	const struct fc_proc *best = NULL;
	bool known = false;

	CUresult r = fc_enter("cuGetProcAddress_v2", false);     /* works before cuInit */

	if (r)
		return r;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (!symbol || !pfn || cudaVersion <= 0 || cudaVersion > fc_cfg.driver_version ||
	    (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
	                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	for (size_t i = 0; i < sizeof(fc_procs) / sizeof(fc_procs[0]); i++) {
		if (strcmp(fc_procs[i].base, symbol))
			continue;
		known = true;
		if (fc_procs[i].version <= cudaVersion &&
		    (!best || fc_procs[i].version > best->version))
			best = &fc_procs[i];
	}
	if (!best) {
		if (status && known)
			*status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		return CUDA_ERROR_NOT_FOUND;
	}
	*pfn = best->fn;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}

/* ---- test controls ------------------------------------------------------ */

void fakecuda_live(struct fakecuda_live *out)
{
	memset(out, 0, sizeof(*out));
	fc_mem_live(out);
	fc_stream_live(out);
	pthread_mutex_lock(&fc_lock);
	for (int i = 0; i < FAKECUDA_MAX_DEVICES; i++)
		out->contexts += fc_primary[i].retains;
	pthread_mutex_unlock(&fc_lock);
}

int fakecuda_reset(void)
{
	struct fakecuda_live l;

	fakecuda_live(&l);
	if (l.allocations || l.mappings || l.reservations || l.mem_allocs ||
	    l.host_registrations || l.streams || l.events || l.contexts)
		return -EBUSY;
	fc_stream_reset();
	pthread_mutex_lock(&fc_lock);
	fc_initialised = false;
	fc_configured = false;
	fc_n_specs = 0;
	fc_n_counted = 0;
	pthread_mutex_unlock(&fc_lock);
	fc_current = NULL;
	return 0;
}

__attribute__((destructor)) static void report_at_exit(void)
{
	const char *path = getenv("FAKECUDA_REPORT");
	struct fakecuda_live l;
	FILE *f;

	if (!path || !*path)
		return;
	fakecuda_live(&l);
	f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "allocations=%llu exports=%llu mappings=%llu reservations=%llu "
	        "mem_allocs=%llu host_registrations=%llu streams=%llu events=%llu "
	        "contexts=%llu\n",
	        (unsigned long long)l.allocations, (unsigned long long)l.exports,
	        (unsigned long long)l.mappings, (unsigned long long)l.reservations,
	        (unsigned long long)l.mem_allocs, (unsigned long long)l.host_registrations,
	        (unsigned long long)l.streams, (unsigned long long)l.events,
	        (unsigned long long)l.contexts);
	fclose(f);
}
