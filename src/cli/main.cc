#include <cstdio>
int main() { std::puts("autoshard"); return 0; }
