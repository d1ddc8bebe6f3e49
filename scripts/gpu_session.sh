#!/bin/bash
# One command on the GPU machine (the `run` tool), from a copy of the repo: steps in order, logs,
# kept proofs and numba's cache back under $OUT.   Usage: scripts/gpu_session.sh STEP...
# Prepare here first, in the git-ignored .gpurun/ (carry it, and .whl/ when present):
#   benchmarks/gpu_ops.py --prebuild .gpurun/cubins   (nvcc here: saves NVRTC compiles there)
#   cp -r ../shared/corpus .gpurun/corpus              (the corpus does not travel by itself)
#   cat <files_at>/numba.tgz.part-* > .gpurun/numba.tgz (after a run: numba's cache for the next one;
#     source mtimes are pinned below so it stays valid while the files are unchanged)
# Proofs the tests kept for snarkjs: tar xzf results.tgz; scripts/verify_unverified.sh res/unverified
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 CUZK_CUDA_PREBUILT=$PWD/.gpurun/cubins CUZK_CORPUS=$PWD/.gpurun/corpus \
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUZK_UNVERIFIED_DIR=/tmp/res/unverified
OUT=${OUT:-/tmp/out}; mkdir -p $OUT /tmp/res
find src -name '*.py' -exec touch -d '2026-01-01 00:00:00' {} +   # numba's cache keys on source mtime
[ -f .gpurun/numba.tgz ] && tar xzf .gpurun/numba.tgz && echo "numba cache restored"
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/site/bin:$PATH
# One numba cache for the warm-up, the tests (tests/conftest.py picks the same) and the daemons they start.
export NUMBA_CACHE_DIR=$(python3 -c "from cuzk.jit_cache import cache_dir; print(cache_dir('$PWD/.cache'))")
python3 -c "import numba, numpy as np; f=numba.njit(parallel=True)(lambda a: a.sum()); f(np.ones(4)); print('numba threading layer', numba.threading_layer())"
nvidia-smi -L; nproc; python3 -c "import numba, cupy, llvmlite.binding as ll; print('numba', numba.__version__, 'cupy', cupy.__version__, ll.get_host_cpu_name())"
cuzk="python3 -m cuzk.cli"
ex=src/cuzk/examples/synthetic_bn254
step() { local name=$1 limit=$2; shift 2; local t=$SECONDS; timeout $limit "$@" > /tmp/res/$name.log 2>&1; local rc=$?; echo "== $name rc=$rc $((SECONDS-t)) s"; tail -n ${TAIL:-12} /tmp/res/$name.log | cut -c1-300; }
for s in "$@"; do
  case $s in
    warm) step warm 400 $cuzk prove --backend cpu -v $ex/circuit.zkey $ex/witness.wtns /tmp/p.json /tmp/pub.json ;;
    warmbg) (timeout 400 $cuzk prove --backend cpu -v $ex/circuit.zkey $ex/witness.wtns /tmp/p.json /tmp/pub.json > /tmp/res/warm.log 2>&1; echo "warm rc=$?" >> /tmp/res/warm.log) & WARM=$! ;;
    wait) t=$SECONDS; wait $WARM; echo "== warm-up waited $((SECONDS-t)) s"; tail -3 /tmp/res/warm.log ;;
    tcuda) step tcuda ${T_CUDA:-200} python3 -m pytest -q -m gpu tests/test_backend_cuda.py -p no:cacheprovider -x --durations=5 ;;
    tmulti) step tmulti ${T_MULTI:-200} python3 -m pytest -q -m gpu tests/test_multi_device.py -p no:cacheprovider --durations=5 ;;
    tnew) step tnew ${T_NEW:-240} python3 -m pytest -q -m gpu tests/test_proofs_in_flight.py tests/test_synthesis_device.py tests/test_bench_gpu.py -p no:cacheprovider --durations=5 ;;
    tkeyhome) step tkeyhome ${T_KEYHOME:-300} python3 -m pytest -q -m gpu tests/test_key_home.py tests/test_synthesis_device.py -p no:cacheprovider -rs --durations=5 ;;
    tengine) step tengine ${T_ENGINE:-540} python3 -m pytest -q -m gpu tests/test_multi_device.py tests/test_proofs_in_flight.py tests/test_synthesis_device.py \
      tests/test_bench_gpu.py tests/test_key_home.py tests/test_engine_procs.py tests/test_cgroup_memory.py tests/test_memory_pinned.py -p no:cacheprovider -rs --durations=10 ;;
    tsel) step tsel ${T_SEL:-300} python3 -m pytest -q -m gpu ${TSEL} -p no:cacheprovider -rs --durations=5 ;;  # TSEL="tests/x.py -k name"
    tprocs) step tprocs ${T_PROCS:-240} python3 -m pytest -q -m gpu tests/test_engine_procs.py -p no:cacheprovider -rs --durations=5 ;;
    dprocs) step dprocs-${LOGN:-20} ${T_DPROCS:-200} python3 benchmarks/device_processes.py --backend cuda --log-n ${LOGN:-20} --proofs ${PROOFS:-48} ;;
    ops) step ops ${T_OPS:-150} python3 benchmarks/gpu_ops.py --sizes ${OPS_SIZES:-16,20,24} --curves ${OPS_CURVES:-bn254} --ops ${OPS:-msm_g1} --out /tmp/res/ops.json ;;
    synthops) step synthops ${T_SYNTHOPS:-120} python3 benchmarks/gpu_ops.py --ops synth --sizes ${SYNTH_SIZES:-16,20,22} --curves bn254 --out /tmp/res/synthops.json ;;
    tsetup) step tsetup ${T_SETUP:-200} python3 -m pytest -q -m gpu tests/test_setup.py tests/test_setup_cuda.py -p no:cacheprovider --durations=5 ;;
    multi) step multi-${LOGN:-20} ${T_MULTIB:-240} python3 benchmarks/multi_gpu.py --log-n ${LOGN:-20} --proofs ${PROOFS:-32} --out /tmp/res/multi_gpu-${LOGN:-20}.json ;;
    hostprof) step hostprof-${LOGN:-16}${TAG} ${T_HOSTPROF:-240} python3 benchmarks/multi_gpu.py --log-n ${LOGN:-16} --proofs ${PROOFS:-200} --gpus 1 \
      --lanes ${LANES:-4} --synth-workers auto --verify --profile --skip-residency ${HOSTPROF_ARGS} --out /tmp/res/hostprof-${LOGN:-16}${TAG}.json ;;
    timeline*)  # timeline-<logn>-<lanes>[-<tag>]: bare lanes (no engine) on a ladder rung (run 'ladder' first), each lane's waits for the device, GPU busy
      # tags, joined by '+': dsyn feeds them as the engine does (multi_gpu.py --device-synthesis); any other only names the run
      IFS=- read -r _ n lanes tag <<< "$s"; mkdir -p /tmp/mg && ln -sfn /tmp/ladder/bn128/2^$n /tmp/mg/synthetic_2^$n; extra=()
      for part in ${tag//+/ }; do [ "$part" = dsyn ] && extra+=(--device-synthesis); done
      step $s ${T_TIMELINE:-200} python3 benchmarks/multi_gpu.py --log-n $n --proofs ${PROOFS:-160} --gpus 1 --lanes $lanes --timeline \
        --skip-residency --skip-engine --dir /tmp/mg "${extra[@]}" --out /tmp/res/$s.json ;;
    ab-*)  # an A/B inside one machine: the files under .gpurun/ab/<name>/ (paths as in the repo) copied over the tree; tag the next steps
      cp -r .gpurun/ab/${s#ab-}/. . && echo "== $s: $(cd .gpurun/ab/${s#ab-} && find . -type f | tr '\n' ' ')" ;;
    overlap) step overlap 200 python3 benchmarks/gpu_ops.py --sizes 22,24 --curves bn254 --ops msm_g1,msm_g2 --host-bases 8 --out /tmp/res/overlap.json ;;
    bench1|bench2)  # cuzk bench on multi_gpu.py's 2^20 circuit (run 'multi' first), 1 or 2 GPUs, self-verify on
      k=$([ $s = bench1 ] && echo "[0]" || echo "[0,1]"); c=/tmp/cuzk-multi-gpu/synthetic_2^${LOGN:-20}
      step $s-${LOGN:-20} ${T_BENCH:-150} $cuzk bench --zkey $c/circuit.zkey --wtns $c/witness.wtns --jobs ${BJOBS:-48} --concurrency ${BCONC:-12} \
        --warmup 2 --engine "devices=$k" --engine synth_workers=${SYNTHW:-4} --out /tmp/res/$s-${LOGN:-20} --no-progress --no-plot ;;
    proofs) step proofs ${T_PROOFS:-240} bash -c "python3 benchmarks/gpu_ops.py --ops none --cpu-max-log 0 --proofs .gpurun/corpus --out /tmp/res/proofs_corpus.json && python3 benchmarks/gpu_ops.py --ops none --curves bn254 --cpu-max-log 0 --proofs /tmp/cuzk-multi-gpu --out /tmp/res/proofs_2e20.json" ;;
    oneshot) step oneshot ${T_ONESHOT:-300} python3 benchmarks/oneshot.py --backend cuda --repeat ${REPEAT:-3} --rapidsnark .gpurun/rapidsnark ${ONESHOT_ARGS} ;;  # cp ../shared/peers/rapidsnark .gpurun/ first
    oneshotv) python3 -m venv --without-pip /tmp/cv && step oneshotv ${T_ONESHOT:-300} python3 benchmarks/oneshot.py --backend cuda --repeat ${REPEAT:-3} \
      --rapidsnark .gpurun/rapidsnark --client-python /tmp/cv/bin/python ${ONESHOT_ARGS} ;;  # the daemon's clients in a venv without the image's site-packages
    benchcircuits)  # benchmarks/make_circuits.py's circuits from their r1cs and wasm (tar czf .gpurun/benchc.tgz -C .bench-cache circuits/*/circuit.{r1cs,wasm}): witness and key made here, in /tmp/bc/circuits
      mkdir -p /tmp/bc && tar xzf .gpurun/benchc.tgz -C /tmp/bc && step benchcircuits ${T_BC:-300} python3 benchmarks/make_circuits.py --out /tmp/bc/circuits $(ls /tmp/bc/circuits) ;;
    pystart) step pystart 90 bash -c 'for flags in "" "-S" "-I"; do t0=$(date +%s%N); for i in 1 2 3 4 5; do python3 $flags -c "import sys"; done; \
      echo "python3 $flags -c \"import sys\": $(( ($(date +%s%N) - t0) / 5000000 )) ms"; done; python3 -X importtime -c "import sys" 2>&1 | sort -t"|" -k2 -n | tail -8; \
      d=$(python3 -c "import site; print(site.getsitepackages()[0])"); echo "$d: $(ls $d | wc -l) entries, .pth: $(ls $d | grep "\.pth$" | tr "\n" " ")"' ;;  # what the interpreter's start costs here
    disk) step disk 60 bash -c "mkdir -p /tmp/ddt && dd if=/dev/zero of=/tmp/ddt/f bs=1M count=1024 conv=fsync 2>&1 | tail -1; df -h /tmp | tail -1" ;;
    ladder) step ladder ${T_LADDER:-500} python3 benchmarks/ladder.py ${LADDER_ARGS} ;;
    lbench*)  # cuzk bench on a ladder rung (run 'ladder' with --dir /tmp/ladder first): lbench-<logn>-<jobs>-<concurrency>-<synth workers>[-<tag>]
      # tags, joined by '+': memN runs the daemon under a cgroup limit of N MiB, kN with proofs_per_device = N, procs with device_processes = true,
      # fsX with journal_fsync = X (true, false or a delay in seconds)
      # (any other tag only names the run, e.g. the side of an A/B)
      # SPY="--gil" (or " "): py-spy (a wheel in .whl) samples the bench and the daemon's processes into /tmp/res/<step>.spy (collapsed stacks)
      IFS=- read -r _ n j c w tag <<< "$s"; r=/tmp/ladder/bn128/2^$n; extra=()
      for part in ${tag//+/ }; do case $part in mem*) extra+=(--memory-limit ${part#mem}MiB) ;; k[0-9]*) extra+=(--engine proofs_per_device=${part#k}) ;;
        procs) extra+=(--engine device_processes=true) ;; fs*) extra+=(--engine journal_fsync=${part#fs}) ;; esac; done
      step $s ${T_BENCH:-150} ${SPY:+py-spy record $SPY --subprocesses --format raw --rate 100 --output /tmp/res/$s.spy --} $cuzk bench --zkey $r/circuit.zkey --wtns $r/witness.wtns --jobs $j --concurrency $c --warmup 4 \
        --engine "devices=[0]" --engine synth_workers=$w "${extra[@]}" ${BENCH_ENGINE} --out /tmp/res/$s --no-progress --no-plot ;;
    mlimit*)  # benchmarks/memory_limit.py on a ladder rung: one cuzk bench unlimited, then under a limit of N MiB; ratios printed
      # mlimit-<logn>-<jobs>-<concurrency>-<synth workers>-<limit MiB>[-procs]  (procs: device_processes = true)
      IFS=- read -r _ n j c w mib tag <<< "$s"; r=/tmp/ladder/bn128/2^$n; extra=(); [ "$tag" = procs ] && extra=(--engine device_processes=true)
      step $s ${T_MLIMIT:-330} python3 benchmarks/memory_limit.py --limit ${mib}MiB --out /tmp/res/$s -- --zkey $r/circuit.zkey \
        --wtns $r/witness.wtns --jobs $j --concurrency $c --warmup 4 --engine "devices=[0]" --engine synth_workers=$w "${extra[@]}" ${BENCH_ENGINE} ;;
    *) echo "unknown step $s" ;;
  esac
done
find src .cache \( -name '*.nbi' -o -name '*.nbc' \) 2>/dev/null | tar czf /tmp/numba.tgz -T - && ls -la /tmp/numba.tgz   # tests keep it in .cache (conftest)
split -b 15m /tmp/numba.tgz $OUT/numba.tgz.part-
tar czf $OUT/results.tgz --exclude=daemon -C /tmp res; ls -la $OUT
