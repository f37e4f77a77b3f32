# fms-hf-tuning 3.2.2 itself, as a user's own image: its `tuning.sft_trainer` under
# `accelerate launch`, started by the harness's launcher (a standalone file, so it never
# shadows fms's own top-level `tuning` package). Every package is pinned in docker/fms.lock.
#   No registry:    BASE_IMAGE=harness-base:bookworm (docker/base.sh)
#   Registry:       BASE_IMAGE=python:3.11-slim-bookworm
# Built offline (`docker build --network none`) from a wheelhouse made on the host
# (`pip download -r docker/fms.lock`), staged in build/wheels/ for the build; the wheels stay
# in the builder stage and are never a layer of the final image.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
LABEL harness.build-stage=fms
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
COPY docker/fms.lock /tmp/fms.lock
COPY build/wheels/ /tmp/wheels/
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install -q --no-index --find-links /tmp/wheels -r /tmp/fms.lock \
 && /opt/venv/bin/pip check
# The demo's tiny model and data, made by this image's own transformers (a model saved by
# another version may not load). Our generators sit on PYTHONPATH for this step only.
# Same paths as the harness image, so the layouts default to them alike.
COPY tuning/__init__.py /tmp/src/tuning/
COPY tuning/container/__init__.py tuning/container/tiny_model.py tuning/container/demo_data.py \
     /tmp/src/tuning/container/
COPY docker/fms_assets.py /tmp/fms_assets.py
RUN PYTHONPATH=/tmp/src /opt/venv/bin/python /tmp/fms_assets.py /opt/harness/assets

FROM ${BASE_IMAGE}
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 HF_HOME=/tmp/hf TRANSFORMERS_NO_ADVISORY_WARNINGS=1 \
    PATH=/opt/venv/bin:$PATH
# tc (faults) and ps; the offline base has them, python:*-slim gets them from apt.
RUN command -v tc >/dev/null && command -v ps >/dev/null || \
    (apt-get update && apt-get install -y --no-install-recommends iproute2 procps \
     && rm -rf /var/lib/apt/lists/*)
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/harness/assets /opt/harness/assets
# Fails the build, saying why, if transformers cannot see torch or fms does not import.
COPY docker/fms_check.py /opt/harness-launch/fms_check.py
RUN python /opt/harness-launch/fms_check.py
COPY tuning/container/launch.py /opt/harness-launch/harness_launch.py
COPY tuning/container/rank/torn.py /opt/harness-launch/torn.py
RUN useradd --create-home --uid 1000 tuner && chmod -R a+rX /opt/harness /opt/harness-launch
USER tuner
WORKDIR /home/tuner
ENV HARNESS_ENTRY=tuning.sft_trainer
ENTRYPOINT ["python", "/opt/harness-launch/harness_launch.py"]
