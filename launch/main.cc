#include "launch/cli.h"

int main(int argc, char** argv) { return hoist::launch::Main(argc, argv); }
