/* What the public builders of src/api share. */
#ifndef TG_API_H
#define TG_API_H
#include "../ir/ir.h"

/* A 0-d constant of x's dtype (f32, or i32 for i32 x), for the
 * tensor-scalar forms; an invalid x propagates. */
tg_tensor tg_api_scalar_like(tg_tensor x, float v, const char *file, int line);
/* A layer weight's init: init (NULL: randn 0.02) with its decay rule
 * overridden by d unless d is TG_DECAY_DEFAULT. */
tg_init tg_api_layer_init(const tg_init *init, tg_decay d);
/* Declares the layer param "<name><suffix>" (name NULL: ""), at any length. */
tg_param tg_api_layer_param(tg_model *m, const char *name, const char *suffix, tg_shape s, tg_init init);
#endif
