#include "sinkgraph/ir.h"
