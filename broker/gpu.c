/* broker/gpu.c — GPU discovery and selection at startup; see gpu.h. */
#include "gpu.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

static struct {
	struct wsync_cuda          cu;
	struct wsync_gpu_inventory inv;
	bool                       selected[WSYNC_GPU_MAX];
} gpu;

static bool spec_explicit(const char *spec)
{
	return strcmp(spec, "all") != 0;
}

static void units(size_t bytes, char *buf, size_t len)
{
	if (bytes >= ((size_t)1 << 30))
		snprintf(buf, len, "%zu GiB", bytes >> 30);
	else
		snprintf(buf, len, "%zu MiB", bytes >> 20);
}

static void log_found(void)
{
	char ver[16], peers[WSYNC_GPU_MAX * WSYNC_GPU_MAX * 6], mem[32], gran[32];

	wsync_cuda_version_text(gpu.inv.driver_version, ver, sizeof(ver));
	log_info("gpu: CUDA driver %s (%s), %d GPU%s", ver, gpu.cu.path, gpu.inv.count_all,
	         gpu.inv.count_all == 1 ? "" : "s");
	if (gpu.inv.count_all > gpu.inv.count)
		log_warn("gpu: only the first %d GPUs are used", gpu.inv.count);
	for (int i = 0; i < gpu.inv.count; i++) {
		const struct wsync_gpu_info *g = &gpu.inv.dev[i];

		units(g->total_mem, mem, sizeof(mem));
		units(g->granularity, gran, sizeof(gran));
		log_info("gpu %d: %s '%s' pci %04x:%02x:%02x mem %s vmm %s fd %s%s%s", i,
		         g->uuid_text, g->name, g->pci_domain, g->pci_bus, g->pci_device, mem,
		         g->vmm ? "yes" : "no", g->posix_fd ? "yes" : "no",
		         g->granularity ? " granularity " : "", g->granularity ? gran : "");
	}
	wsync_gpu_peers_text(&gpu.inv, peers, sizeof(peers));
	log_info("gpu: peer access %s", peers);
}

/* Marks the GPUs of a LIST; -1 after logging the first that is absent or
 * unusable. */
static int select_list(const char *spec)
{
	char buf[GPU_SPEC_MAX], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", spec);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int i = wsync_gpu_find(&gpu.inv, t);

		if (i < 0) {
			log_error("--gpus: no GPU '%s' here (%d found; name them by UUID, "
			          "or by ordinal as this broker sees them)", t, gpu.inv.count);
			return -1;
		}
		if (!gpu.inv.dev[i].posix_fd) {
			log_error("--gpus: GPU %d (%s) cannot export memory as a file descriptor "
			          "(VMM %s)", i, gpu.inv.dev[i].uuid_text,
			          gpu.inv.dev[i].vmm ? "without POSIX-fd handles" : "unsupported");
			return -1;
		}
		gpu.selected[i] = true;
	}
	return 0;
}

static void log_selected(void)
{
	char list[WSYNC_GPU_MAX * 4] = "";
	size_t at = 0;

	for (int i = 0; i < gpu.inv.count; i++) {
		if (!gpu.selected[i]) {
			if (gpu.inv.dev[i].vmm && !gpu.inv.dev[i].posix_fd)
				log_warn("gpu %d: no POSIX-fd handles; not used for device models", i);
			else if (!gpu.inv.dev[i].vmm)
				log_warn("gpu %d: no VMM support; not used for device models", i);
			continue;
		}
		at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%d", at ? "," : "", i);
	}
	if (at)
		log_info("gpu: serving device models on GPU %s", list);
	else
		log_info("gpu: no GPU can export memory; serving host models only");
}

int gpu_start(const char *spec)
{
	bool named = spec_explicit(spec);
	char why[512];
	int err;

	memset(&gpu, 0, sizeof(gpu));
	if (!strcmp(spec, "none")) {
		log_info("gpu: disabled (--gpus none); serving host models only");
		return 0;
	}
	err = wsync_cuda_load(&gpu.cu, why, sizeof(why));
	if (!err)
		err = wsync_cuda_discover(&gpu.cu, &gpu.inv, why, sizeof(why));
	if (err) {
		if (named) {
			log_error("--gpus %s: %s", spec, why);
			goto out_unload;
		}
		/* all: a machine without a usable driver is an ordinary case */
		if (err == -ENOENT || err == -ENOSYS)
			log_info("gpu: %s; serving host models only", why);
		else
			log_warn("gpu: %s; serving host models only", why);
		gpu_stop();
		return 0;
	}
	if (gpu.inv.count == 0) {
		char ver[16];

		wsync_cuda_version_text(gpu.inv.driver_version, ver, sizeof(ver));
		if (named) {
			log_error("--gpus %s: the CUDA driver %s (%s) shows no GPU", spec,
			          ver, gpu.cu.path);
			goto out_unload;
		}
		log_info("gpu: CUDA driver %s (%s), no GPU; serving host models only", ver,
		         gpu.cu.path);
		gpu_stop();
		return 0;
	}
	log_found();
	if (named) {
		if (select_list(spec))
			goto out_unload;
	} else {
		for (int i = 0; i < gpu.inv.count; i++)
			gpu.selected[i] = gpu.inv.dev[i].posix_fd;
	}
	log_selected();
	/* The driver stays loaded (without a context) only if it will be used. */
	for (int i = 0; i < gpu.inv.count; i++)
		if (gpu.selected[i])
			return 0;
	wsync_cuda_unload(&gpu.cu);
	return 0;

out_unload:
	gpu_stop();
	return -1;
}

void gpu_stop(void)
{
	wsync_cuda_unload(&gpu.cu);
	memset(&gpu, 0, sizeof(gpu));
}

const struct wsync_gpu_inventory *gpu_inventory(void)
{
	return &gpu.inv;
}

bool gpu_selected(int index)
{
	return index >= 0 && index < gpu.inv.count && gpu.selected[index];
}

const struct wsync_cuda *gpu_driver(void)
{
	return gpu.cu.lib ? &gpu.cu : NULL;
}
