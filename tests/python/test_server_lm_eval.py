"""lm-evaluation-harness itself against gridq serve (issue 14 item 8): a loglikelihood (multiple-choice) task
from a local file, run through lm-eval's `local-completions` model with the bundled model's tokenizer.

Skipped unless lm_eval is importable. It is not in scripts/requirements-test.txt: lm-eval needs no torch for
this path, but its declared dependencies (datasets with pyarrow and pandas, transformers, evaluate,
scikit-learn with scipy, sacrebleu, rouge-score) are ~150 MB of wheels for the 2-core CI. To run it:
`pip install --no-deps lm-eval==0.4.13` plus datasets evaluate transformers sacrebleu scikit-learn
rouge-score pytablewriter sqlitedict word2number more_itertools, then pytest this file."""

import json

import pytest

lm_eval = pytest.importorskip("lm_eval")

from server_util import MODEL_DIR, MODEL_ID, Server  # noqa: E402

DOCS = [
    {"question": "def add(a, b):\n    return", "choices": [" a + b", " a - b", " None"], "answer": 0},
    {"question": "import numpy as", "choices": [" np", " pd", " plt"], "answer": 0},
    {"question": "for i in range(10):\n   ", "choices": [" print(i)", " return", " break"], "answer": 0},
    {"question": "The capital of France is", "choices": [" Paris", " Berlin"], "answer": 0},
]


def test_lm_eval_loglikelihood_task_completes(tmp_path, monkeypatch):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp_path / "gridq_local.yaml").write_text(
        "task: gridq_local\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")
    s = Server("--max-model-len", "512", api_key=None)
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "unused")
        out = simple_evaluate(
            model="local-completions",
            model_args=(f"model={MODEL_ID},base_url={s.base}/v1/completions,tokenizer_backend=huggingface,"
                        f"tokenizer={MODEL_DIR},num_concurrent=1,max_retries=1"),
            tasks=["gridq_local"], task_manager=TaskManager(include_path=str(tmp_path)))
        acc = out["results"]["gridq_local"]["acc,none"]
        assert 0.0 <= acc <= 1.0
        # Every loglikelihood request was answered with finite scores: lm-eval's per-sample log.
        for sample in out["samples"]["gridq_local"]:
            for ll, _greedy in sample["filtered_resps"]:
                assert ll < 0
    finally:
        s.stop()
