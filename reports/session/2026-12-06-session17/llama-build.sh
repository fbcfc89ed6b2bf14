#!/usr/bin/env bash
# Builds llama-bench from out/llama-src.tgz (CPU only, niced), carried in a later call than bin/.
D=/tmp/dev; mkdir -p $D /tmp/llama
{ tar -xzf out/llama-src.tgz -C /tmp/llama && cd /tmp/llama &&
  nice -n 15 cmake -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_COMMIT=d32676d >$D/llama-build.log 2>&1 &&
  nice -n 15 cmake --build b --target llama-bench -j 12 >>$D/llama-build.log 2>&1; } 
echo "llama-bench build rc=$? $(date -u +%T)" >>$D/llama-build.log
