#include "sbx/model.h"
