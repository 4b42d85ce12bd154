/* placeholder */
#include "ctl.h"
int ctl_cmd_metrics(const struct ctl_opts *o, int argc, char **argv) { (void)o; (void)argc; (void)argv; return 3; }
int ctl_cmd_serve_metrics(const struct ctl_opts *o, int argc, char **argv) { (void)o; (void)argc; (void)argv; return 3; }
