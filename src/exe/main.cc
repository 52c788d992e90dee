#include "cli/cli.h"

int main(int argc, char** argv) { return cohort::cli::main(argc, argv); }
