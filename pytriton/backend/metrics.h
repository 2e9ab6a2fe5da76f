/* The worker's metrics on Triton's /metrics (metrics.c): one thread per instance polls them. */
#ifndef PYTRITON_METRICS_H
#define PYTRITON_METRICS_H

#include "instance.h"

typedef struct pyt_metrics pyt_metrics;

/* The exporter of `instance`'s worker, its thread started; NULL when the model exports none
 * (model->metrics is 0) or there is no memory. */
pyt_metrics* pyt_metrics_start(const pyt_instance* instance);
/* Stop the thread and free the exporter (Triton's metric objects stay, see metrics.c); NULL: none. */
void pyt_metrics_stop(pyt_metrics* exporter);

#endif
