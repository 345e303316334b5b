#!/usr/bin/env bash
# Retrain the shipped H100 predictor and remake every figure benchmarks/PREDICTOR.md quotes
# (~6 min on a 2-core machine; no GPU needed: the samples are measured already). Run from the
# repo root after a change to the predictor's terms, ties or training file:
#   bash benchmarks/predictor_reports.sh
set -euo pipefail
S=codl_tvm/data/samples-x86-cuda-h100.csv
P=codl_tvm/data/predictor-x86-cuda.json
R=benchmarks/results
# test sets measured on the H100 machine and kept out of training
STRATA=(deep=$R/deep-h100/deep-samples.csv deep2=$R/deep2-h100/deep2-samples.csv
        body=$R/body-h100/body-samples.csv pointwise=$R/pointwise-h100/pointwise-samples.csv
        pools=$R/pools-h100/pools-samples.csv padpools=$R/padpool-h100/padpool-samples.csv
        refetch=$R/refetch-h100/refetch-samples.csv)
EXTRA=()
for s in "${STRATA[@]}"; do EXTRA+=(--extra "$s"); done

codl-tvm train $S -o $P
wc -c $P
# codl's acc10: mean of 20 seeded 30% splits, each held-out CNN, each stratum
python benchmarks/predictor_seeds.py $S "${EXTRA[@]}" --json $R/predictor-h100-seeds.json
# codl against flops / eop / gbdt, size and prediction time, per held-out CNN
for m in YOLO-V2 VGG-16 POSENET; do
    python benchmarks/predictor_report.py $S --test-models $m --json $R/predictor-h100-$m.json \
        > /dev/null
done
# CNNs never profiled for training (ResNet-18/50), measured beside control rows, calibrated
python benchmarks/heldout_cnn_report.py $P $R/resnet-h100/joined/rnjoin.csv $S \
    --json $R/resnet-h100/resnet-report.json
# the same CPU rows measured on a second instance
python benchmarks/instance_report.py $S $R/cpu40-h100/cpu40-new.csv \
    --json $R/cpu40-h100/instance-report.json > /dev/null
