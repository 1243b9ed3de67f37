#include <stddef.h>
#include <stdint.h>

int main(void) {
  return 77;
}
#include "support/cm.h"
