/* libclient/view.c — finding a tensor by name in a view or a slab. */
#include <errno.h>

#include "checksum.h"
#include "client.h"
#include "pub.h"
#include "shm/errmsg.h"
#include "sub_attach.h"

int wsync_view_tensor(const wsync_view *v, const char *name,
                      const void **data, const wsync_tensor_desc **desc)
{
	const struct sub_maps *m;
	long i;

	if (!v || !name)
		return wsync_fail(-EINVAL, "wsync_view_tensor: view and name must not be NULL");
	if (!v->priv_sub || !v->base)
		return wsync_fail(-EINVAL, "wsync_view_tensor: the view is not held (released "
		                  "or never acquired)");
	/* the view's own maps: the subscription's may be newer memory by now,
	 * and a descriptor handed out must live as long as the view */
	if (v->priv_hazard >= WSYNC_MAX_VIEWS)
		return wsync_fail(-EINVAL, "wsync_view_tensor: not a live view");
	m = atomic_load_explicit(&v->priv_sub->c->hz[v->priv_hazard].maps,
	                         memory_order_relaxed);
	if (!m)
		return wsync_fail(-EINVAL, "wsync_view_tensor: the view's model is not mapped");
	i = wsync_name_index_find(&m->index, m->tensors, name);
	if (i < 0)
		return wsync_fail(-ENOENT, "model '%s': no tensor '%.128s'",
		                  v->priv_sub->model, name);
	if (data)
		*data = (const char *)v->base + m->tensors[i].offset;
	if (desc)
		*desc = &m->tensors[i];
	return 0;
}

int wsync_slab_tensor(const wsync_slab *s, const char *name,
                      void **data, const wsync_tensor_desc **desc)
{
	const struct wsync_pub *p;
	long i;

	if (!s || !name)
		return wsync_fail(-EINVAL, "wsync_slab_tensor: slab and name must not be NULL");
	p = s->priv_pub;
	if (!p || !s->base)
		return wsync_fail(-EINVAL, "wsync_slab_tensor: the slab was never begun");
	i = wsync_name_index_find(&p->index, p->tensors, name);
	if (i < 0)
		return wsync_fail(-ENOENT, "model '%s': no tensor '%.128s'", p->model, name);
	/* a writable pointer: whatever a copy hashed of this tensor may
	 * change, so its blocks are hashed again at commit (slab_copy.c) */
	if (p->begun)
		sum_blocks_forget(p->sums, p->cur.version, p->tensors[i].offset,
		                  wsync_tensor_bytes(&p->tensors[i]));
	if (data)
		*data = (char *)s->base + p->tensors[i].offset;
	if (desc)
		*desc = &p->tensors[i];
	return 0;
}
