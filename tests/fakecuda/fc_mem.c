/*
 * tests/fakecuda/fc_mem.c — device memory of the fake driver.
 *
 * A device pointer is an address of this process. cuMemCreate makes a memfd
 * (named "fakecuda.dev<physical index>") of the requested size; its exported
 * fd is a dup of that memfd, so an importer in another process maps the
 * same pages. cuMemAddressReserve reserves PROT_NONE address space;
 * cuMemMap maps the memfd there with no access; cuMemSetAccess sets the
 * access of each device it names, as on a GPU (a device that cannot reach
 * the memory's GPU peer to peer is refused), and copies check the access of
 * the device that issues them (fc_mem_check). The host's protection is the
 * widest any device has (PROT_READ for all of them maps it read-only: a
 * write faults, as a collector's stray write must). cuMemUnmap puts
 * PROT_NONE anonymous memory back, so the reservation stays. An
 * allocation's memory goes when its handle is released and its last
 * mapping is gone, as with the driver. Host registrations remember the
 * context that made them: without CU_MEMHOSTREGISTER_PORTABLE the memory
 * is pinned for that context only (fc_host_pinned).
 */
#include "fc_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct fc_alloc {                      /* a cuMemCreate or imported handle */
	struct fc_alloc *next;
	int      fd;
	size_t   size;
	int      phys;
	bool     released;                 /* cuMemRelease was called */
	bool     budgeted;                 /* counts against mem_used (created here) */
	unsigned mappings;
};

struct fc_range {                      /* reservations, mappings, cuMemAlloc, host registrations */
	struct fc_range *next;
	uintptr_t addr;
	size_t    size;
	int       phys;
	int       prot;                    /* mappings: the host's PROT_*, the widest of prot_dev */
	int       prot_dev[FAKECUDA_MAX_DEVICES];   /* mappings: PROT_* per visible device */
	struct fc_alloc *alloc;            /* mappings */
	CUcontext ctx;                     /* host registrations: current when made */
	unsigned  flags;                   /* host registrations: CU_MEMHOSTREGISTER_* */
};

struct fc_export {
	struct fc_export *next;
	int   fd;
	dev_t dev;
	ino_t ino;
};

static struct fc_alloc  *allocs;
static struct fc_range  *reservations, *mappings, *mem_allocs, *host_regs;
static struct fc_export *exports;

static void range_unlink(struct fc_range **head, struct fc_range *r)
{
	for (struct fc_range **pp = head; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			free(r);
			return;
		}
}

static struct fc_range *range_add(struct fc_range **head, uintptr_t addr, size_t size, int phys)
{
	struct fc_range *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->addr = addr;
	r->size = size;
	r->phys = phys;
	r->next = *head;
	*head = r;
	return r;
}

/* The range of head that contains [addr, addr+size), or NULL. */
static struct fc_range *range_find(struct fc_range *head, uintptr_t addr, size_t size)
{
	for (struct fc_range *r = head; r; r = r->next)
		if (addr >= r->addr && size <= r->size && addr - r->addr <= r->size - size)
			return r;
	return NULL;
}

static bool range_overlaps(struct fc_range *head, uintptr_t addr, size_t size)
{
	for (struct fc_range *r = head; r; r = r->next)
		if (addr < r->addr + r->size && r->addr < addr + size)
			return true;
	return false;
}

static struct fc_alloc *alloc_find(CUmemGenericAllocationHandle h)
{
	for (struct fc_alloc *a = allocs; a; a = a->next)
		if ((uintptr_t)a == h)
			return a;
	return NULL;
}

/* Frees a if it is released and unmapped; fc_lock held. */
static void alloc_put(struct fc_alloc *a)
{
	if (!a->released || a->mappings)
		return;
	for (struct fc_alloc **pp = &allocs; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	if (a->budgeted)
		fc_cfg.mem_used[a->phys] -= a->size;
	close(a->fd);
	free(a);
}

static CUresult prop_check(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!fc_dev_valid(prop->location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	if (fc_cfg.no_vmm)
		return CUDA_ERROR_NOT_SUPPORTED;
	if ((prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) && fc_cfg.no_fd)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
	CUresult r;

	FC_ENTER("cuMemGetAllocationGranularity");
	if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	                     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	r = prop_check(prop);
	if (r)
		return r;
	*granularity = FAKECUDA_GRANULARITY;
	return CUDA_SUCCESS;
}

static CUresult budget_take(int phys, size_t size)
{
	if (fc_cfg.mem_used[phys] + size > fc_cfg.mem_budget)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fc_cfg.mem_used[phys] += size;
	return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct fc_alloc *a;
	char name[32];
	CUresult r;
	int phys;

	FC_ENTER("cuMemCreate");
	if (!handle || flags || size == 0 || size % FAKECUDA_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	r = prop_check(prop);
	if (r)
		return r;
	phys = fc_phys(prop->location.id);
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	snprintf(name, sizeof(name), "fakecuda.dev%d", phys);
	a->fd = memfd_create(name, MFD_CLOEXEC);
	if (a->fd < 0 || ftruncate(a->fd, (off_t)size) < 0) {
		if (a->fd >= 0)
			close(a->fd);
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->size = size;
	a->phys = phys;
	pthread_mutex_lock(&fc_lock);
	r = budget_take(phys, size);
	if (!r) {
		a->budgeted = true;
		a->next = allocs;
		allocs = a;
	}
	pthread_mutex_unlock(&fc_lock);
	if (r) {
		close(a->fd);
		free(a);
		return r;
	}
	*handle = (uintptr_t)a;
	return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct fc_alloc *a;
	CUresult r = CUDA_SUCCESS;

	FC_ENTER("cuMemRelease");
	pthread_mutex_lock(&fc_lock);
	a = alloc_find(handle);
	if (!a || a->released) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		a->released = true;
		alloc_put(a);
	}
	pthread_mutex_unlock(&fc_lock);
	return r;
}

CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags)
{
	struct fc_export *e;
	struct stat st;
	struct fc_alloc *a;
	CUresult r = CUDA_SUCCESS;
	int fd = -1;

	FC_ENTER("cuMemExportToShareableHandle");
	if (!shareable || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fc_lock);
	a = alloc_find(handle);
	if (!a || a->released)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!a->budgeted && fc_cfg.no_fd)
		r = CUDA_ERROR_NOT_SUPPORTED;
	else if ((fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0)) < 0 || fstat(fd, &st) < 0)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (!r) {
		e->fd = fd;
		e->dev = st.st_dev;
		e->ino = st.st_ino;
		e->next = exports;
		exports = e;
		*(int *)shareable = fd;
	}
	pthread_mutex_unlock(&fc_lock);
	if (r) {
		if (fd >= 0)
			close(fd);
		free(e);
	}
	return r;
}

/* The physical device of a fake memfd, from its name, or -1. */
static int memfd_phys(int fd)
{
	char path[64], target[128];
	ssize_t n;
	int phys;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return -1;
	target[n] = '\0';
	if (sscanf(target, "/memfd:fakecuda.dev%d", &phys) != 1 ||
	    phys < 0 || phys >= fc_cfg.n_phys)
		return -1;
	return phys;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                        CUmemAllocationHandleType type)
{
	int fd = (int)(intptr_t)os_handle, phys;
	struct fc_alloc *a;
	struct stat st;

	FC_ENTER("cuMemImportFromShareableHandle");
	if (!handle || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	if (fc_cfg.no_vmm || fc_cfg.no_fd)
		return CUDA_ERROR_NOT_SUPPORTED;
	phys = memfd_phys(fd);
	if (phys < 0 || fstat(fd, &st) < 0 || st.st_size <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (fc_vis_of_phys(phys) < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);     /* the caller keeps its fd */
	if (a->fd < 0) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->size = (size_t)st.st_size;
	a->phys = phys;
	pthread_mutex_lock(&fc_lock);
	a->next = allocs;
	allocs = a;
	pthread_mutex_unlock(&fc_lock);
	*handle = (uintptr_t)a;
	return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                             CUdeviceptr addr, unsigned long long flags)
{
	uintptr_t base, aligned;
	void *p;

	FC_ENTER("cuMemAddressReserve");
	if (!ptr || flags || addr || size == 0 || size % FAKECUDA_GRANULARITY ||
	    (alignment & (alignment - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (fc_cfg.no_vmm)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (alignment < FAKECUDA_GRANULARITY)
		alignment = FAKECUDA_GRANULARITY;
	p = mmap(NULL, size + alignment, PROT_NONE,
	         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	base = (uintptr_t)p;
	aligned = (base + alignment - 1) & ~(uintptr_t)(alignment - 1);
	if (aligned > base)
		munmap(p, aligned - base);
	if (aligned + size < base + size + alignment)
		munmap((void *)(aligned + size), base + size + alignment - aligned - size);
	pthread_mutex_lock(&fc_lock);
	if (!range_add(&reservations, aligned, size, -1)) {
		pthread_mutex_unlock(&fc_lock);
		munmap((void *)aligned, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&fc_lock);
	*ptr = aligned;
	return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct fc_range *r;
	CUresult ret = CUDA_SUCCESS;

	FC_ENTER("cuMemAddressFree");
	pthread_mutex_lock(&fc_lock);
	r = range_find(reservations, ptr, size);
	if (!r || r->addr != ptr || r->size != size || range_overlaps(mappings, ptr, size)) {
		ret = CUDA_ERROR_INVALID_VALUE;     /* unknown, partial, or still mapped */
	} else {
		munmap((void *)ptr, size);
		range_unlink(&reservations, r);
	}
	pthread_mutex_unlock(&fc_lock);
	return ret;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	struct fc_alloc *a;
	struct fc_range *m;
	CUresult r = CUDA_SUCCESS;

	FC_ENTER("cuMemMap");
	if (flags || offset || size == 0 || ptr % FAKECUDA_GRANULARITY ||
	    size % FAKECUDA_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fc_lock);
	a = alloc_find(handle);
	if (!a || a->released || size > a->size || !range_find(reservations, ptr, size) ||
	    range_overlaps(mappings, ptr, size)) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0) ==
	           MAP_FAILED) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (!(m = range_add(&mappings, ptr, size, a->phys))) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		m->alloc = a;
		m->prot = PROT_NONE;
		a->mappings++;
	}
	pthread_mutex_unlock(&fc_lock);
	return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	struct fc_range *m;
	struct fc_alloc *a;
	CUresult r = CUDA_SUCCESS;

	FC_ENTER("cuMemUnmap");
	pthread_mutex_lock(&fc_lock);
	m = range_find(mappings, ptr, size);
	if (!m || m->addr != ptr || m->size != size) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		/* Back to reserved, inaccessible address space. */
		mmap((void *)ptr, size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
		a = m->alloc;
		range_unlink(&mappings, m);
		a->mappings--;
		alloc_put(a);
	}
	pthread_mutex_unlock(&fc_lock);
	return r;
}

/* Access is set per device, as on a GPU; the host (the one address space
 * here) gets the widest access any device has. A device that cannot reach
 * the memory's GPU peer to peer cannot be given access. */
static int access_prot(CUmemAccess_flags flags)
{
	switch (flags) {
	case CU_MEM_ACCESS_FLAGS_PROT_NONE:
		return PROT_NONE;
	case CU_MEM_ACCESS_FLAGS_PROT_READ:
		return PROT_READ;
	case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
		return PROT_READ | PROT_WRITE;
	default:
		return -1;
	}
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	CUresult r = CUDA_SUCCESS;
	uintptr_t at;

	FC_ENTER("cuMemSetAccess");
	if (!desc || !count || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    access_prot(desc[i].flags) < 0)
			return CUDA_ERROR_INVALID_VALUE;
		if (!fc_dev_valid(desc[i].location.id))
			return CUDA_ERROR_INVALID_DEVICE;
	}
	pthread_mutex_lock(&fc_lock);
	/* The range must be covered by whole mappings, without gaps, and every
	 * device named must reach each mapping's GPU. */
	for (at = ptr; at < ptr + size; ) {
		struct fc_range *m = range_find(mappings, at, 1);

		if (!m || m->addr != at || m->addr + m->size > ptr + size) {
			r = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		for (size_t i = 0; i < count && !r; i++) {
			int phys = fc_phys(desc[i].location.id);

			if (phys != m->phys && !fc_cfg.peer[phys][m->phys])
				r = CUDA_ERROR_INVALID_DEVICE;
		}
		if (r)
			break;
		at += m->size;
	}
	for (at = ptr; !r && at < ptr + size; ) {
		struct fc_range *m = range_find(mappings, at, 1);
		int prot = PROT_NONE;

		for (size_t i = 0; i < count; i++)
			m->prot_dev[desc[i].location.id] = access_prot(desc[i].flags);
		for (int d = 0; d < FAKECUDA_MAX_DEVICES; d++)
			prot |= m->prot_dev[d];
		if (mprotect((void *)m->addr, m->size, prot) < 0)
			r = CUDA_ERROR_UNKNOWN;
		m->prot = prot;
		at += m->size;
	}
	pthread_mutex_unlock(&fc_lock);
	return r;
}

/* ---- plain device allocations, host registration, pointers ------------- */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
	CUresult r;
	void *p;
	int phys;

	FC_ENTER("cuMemAlloc_v2");
	if (fc_need_ctx())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!dptr || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	phys = fc_phys(fc_current->dev);
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fc_lock);
	r = budget_take(phys, size);
	if (!r && !range_add(&mem_allocs, (uintptr_t)p, size, phys)) {
		fc_cfg.mem_used[phys] -= size;
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&fc_lock);
	if (r) {
		munmap(p, size);
		return r;
	}
	*dptr = (uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	struct fc_range *m;
	CUresult r = CUDA_SUCCESS;

	FC_ENTER("cuMemFree_v2");
	pthread_mutex_lock(&fc_lock);
	m = range_find(mem_allocs, dptr, 1);
	if (!m || m->addr != dptr) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		munmap((void *)m->addr, m->size);
		fc_cfg.mem_used[m->phys] -= m->size;
		range_unlink(&mem_allocs, m);
	}
	pthread_mutex_unlock(&fc_lock);
	return r;
}

CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
	const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
	                       CU_MEMHOSTREGISTER_READ_ONLY;
	struct fc_range *h;
	CUresult r = CUDA_SUCCESS;

	FC_ENTER("cuMemHostRegister_v2");
	if (fc_need_ctx())
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!p || size == 0 || (flags & ~known))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fc_lock);
	if (range_overlaps(host_regs, (uintptr_t)p, size)) {
		r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	} else if (!(h = range_add(&host_regs, (uintptr_t)p, size, fc_phys(fc_current->dev)))) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		h->ctx = fc_current;
		h->flags = flags;
	}
	pthread_mutex_unlock(&fc_lock);
	return r;
}

/* A registration belongs to the context that made it unless it is
 * portable: unregistering it needs that context current. */
CUresult cuMemHostUnregister(void *p)
{
	struct fc_range *h;
	CUresult r = CUDA_SUCCESS;

	FC_ENTER("cuMemHostUnregister");
	if (fc_need_ctx())
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&fc_lock);
	h = range_find(host_regs, (uintptr_t)p, 1);
	if (!h || h->addr != (uintptr_t)p ||
	    (!(h->flags & CU_MEMHOSTREGISTER_PORTABLE) && h->ctx != fc_current))
		r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	else
		range_unlink(&host_regs, h);
	pthread_mutex_unlock(&fc_lock);
	return r;
}

bool fc_host_pinned(const void *p, size_t n, CUcontext ctx)
{
	struct fc_range *h;
	bool pinned;

	pthread_mutex_lock(&fc_lock);
	h = range_find(host_regs, (uintptr_t)p, n ? n : 1);
	pinned = h && ((h->flags & CU_MEMHOSTREGISTER_PORTABLE) || h->ctx == ctx);
	pthread_mutex_unlock(&fc_lock);
	return pinned;
}

CUresult fc_mem_check(CUdeviceptr p, size_t n, bool write, int by)
{
	struct fc_range *m;
	CUresult r = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&fc_lock);
	m = range_find(mappings, p, n ? n : 1);
	if (m && by >= 0 && by < FAKECUDA_MAX_DEVICES &&
	    (m->prot_dev[by] & (write ? PROT_WRITE : PROT_READ)))
		r = CUDA_SUCCESS;
	else if (!m && range_find(mem_allocs, p, n ? n : 1))
		r = CUDA_SUCCESS;
	pthread_mutex_unlock(&fc_lock);
	return r;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	struct fc_range *m;
	int dev = -1;

	FC_ENTER("cuPointerGetAttribute");
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fc_lock);
	m = range_find(mappings, ptr, 1);
	if (!m)
		m = range_find(mem_allocs, ptr, 1);
	if (m)
		dev = fc_vis_of_phys(m->phys);
	pthread_mutex_unlock(&fc_lock);
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = dev;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* ---- accounting ----------------------------------------------------------- */

static uint64_t range_count(struct fc_range *head)
{
	uint64_t n = 0;

	for (struct fc_range *r = head; r; r = r->next)
		n++;
	return n;
}

/* Exported fds the program has closed (or reused for something else) are
 * forgotten here. */
static uint64_t exports_live(void)
{
	uint64_t n = 0;

	for (struct fc_export **pp = &exports; *pp; ) {
		struct fc_export *e = *pp;
		struct stat st;

		if (fstat(e->fd, &st) == 0 && st.st_dev == e->dev && st.st_ino == e->ino) {
			n++;
			pp = &e->next;
		} else {
			*pp = e->next;
			free(e);
		}
	}
	return n;
}

/* When the fake is unloaded (dlclose, exit), the records of exports the
 * program has closed go too: only a live count frees them otherwise, and a
 * leak checker in the program (a sanitizer build of wsyncd) would report
 * them as its own once the fake's globals are unmapped. */
__attribute__((destructor)) static void exports_forget_closed(void)
{
	pthread_mutex_lock(&fc_lock);
	exports_live();
	pthread_mutex_unlock(&fc_lock);
}

void fc_mem_live(struct fakecuda_live *out)
{
	pthread_mutex_lock(&fc_lock);
	for (struct fc_alloc *a = allocs; a; a = a->next)
		out->allocations++;
	out->exports = exports_live();
	out->mappings = range_count(mappings);
	out->reservations = range_count(reservations);
	out->mem_allocs = range_count(mem_allocs);
	out->host_registrations = range_count(host_regs);
	pthread_mutex_unlock(&fc_lock);
}
