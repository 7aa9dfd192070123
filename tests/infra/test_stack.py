"""The synthesized Joiner stack: event routing, queues, functions, IAM, access entries, alarms, tables."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match, Template

from infra.deployment import (
    BATCHING_WINDOW_SECONDS,
    FUNCTION_SPECS,
    INTERRUPTION_RULES,
    INTERRUPTION_VISIBILITY_SECONDS,
    MAX_RECEIVE_COUNT,
    SPECS_BY_NAME,
    WORK_MAX_RECEIVE_COUNT,
    WORK_VISIBILITY_SECONDS,
    specs_for_mode,
)
from tests.infra.conftest import CLUSTER, Synthesized


@pytest.fixture(scope="module")
def template(synthesized: Synthesized) -> Template:
    return Template.from_json(synthesized.template)


def logical_id(synthesized: Synthesized, resource_type: str, fragment: str) -> str:
    (match,) = [key for key in synthesized.resources(resource_type) if fragment in key]
    return match


def statements(synthesized: Synthesized, policy_fragment: str) -> list[dict]:
    policy = synthesized.template["Resources"][logical_id(synthesized, "AWS::IAM::Policy", policy_fragment)]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def statement(synthesized: Synthesized, policy_fragment: str, sid: str) -> dict:
    (found,) = [s for s in statements(synthesized, policy_fragment) if s.get("Sid") == sid]
    return found


def function_id(synthesized: Synthesized, name: str) -> str:
    return logical_id(synthesized, "AWS::Lambda::Function", f"Functions{name.capitalize()}")


def test_synth_time_is_reported(synthesized: Synthesized) -> None:
    print(f"\nsynth (with cdk-nag) took {synthesized.seconds:.1f} s")
    assert synthesized.seconds < 60


# ---------------------------------------------------------------- ingestion


@pytest.mark.parametrize(
    ("source", "detail_type", "detail"),
    [
        ("aws.ec2", "EC2 Spot Instance Interruption Warning", None),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation", None),
        ("aws.ec2", "EC2 Instance State-change Notification", {"state": ["stopping", "stopped", "shutting-down", "terminated"]}),
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning", None),
        # AWS documents the Capacity Block warning under two names: one rule matches both
        ("aws.ec2", ["Capacity Block Reservation Expiration Warning", "Capacity Block Expiration Warning"], None),
        ("aws.health", "AWS Health Event", {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]}),
    ],
)
def test_each_interruption_rule_has_its_exact_pattern_and_targets_the_queue(synthesized, source, detail_type, detail):
    queue = logical_id(synthesized, "AWS::SQS::Queue", "IngestionInterruptionQueue")
    dlq = logical_id(synthesized, "AWS::SQS::Queue", "IngestionInterruptionDeadLetterQueue")
    expected = {"source": [source], "detail-type": detail_type if isinstance(detail_type, list) else [detail_type]}
    if detail is not None:
        expected["detail"] = detail
    rules = [rule for rule in synthesized.resources("AWS::Events::Rule").values() if rule["Properties"].get("EventPattern") == expected]
    assert len(rules) == 1, f"no single rule with pattern {expected}"
    (target,) = rules[0]["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [queue, "Arn"]}
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [dlq, "Arn"]}}
    assert "InputTransformer" not in target and "Input" not in target  # raw event JSON as body


def test_exactly_six_event_pattern_rules(synthesized):
    patterns = [r for r in synthesized.resources("AWS::Events::Rule").values() if "EventPattern" in r["Properties"]]
    assert len(patterns) == 6


def test_interruption_queue_policy_admits_only_this_stacks_rules_and_denies_plain_http(synthesized):
    queue = logical_id(synthesized, "AWS::SQS::Queue", "IngestionInterruptionQueue")
    rule_ids = sorted(key for key, rule in synthesized.resources("AWS::Events::Rule").items() if "EventPattern" in rule["Properties"])
    (policy,) = [p for p in synthesized.resources("AWS::SQS::QueuePolicy").values() if p["Properties"]["Queues"] == [{"Ref": queue}]]
    allows = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert len(allows) == 1
    allow = allows[0]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"} and allow["Action"] == "sqs:SendMessage"
    source_arns = allow["Condition"]["ArnEquals"]["aws:SourceArn"]
    assert sorted(arn["Fn::GetAtt"][0] for arn in source_arns) == rule_ids
    denies = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert denies and denies[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_eventbridge_needs_no_key_grant_the_interruption_queues_use_sse_sqs(synthesized):
    """EventBridge writes to SSE-SQS queues with the queue policy alone; a KMS grant fenced by a
    condition key it may not send would drop every event (and every dead letter) silently."""
    (key,) = synthesized.resources("AWS::KMS::Key").values()
    assert key["Properties"]["EnableKeyRotation"] is True
    assert not [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Principal") == {"Service": "events.amazonaws.com"}]
    for fragment in ("IngestionInterruptionQueue", "IngestionInterruptionDeadLetterQueue"):
        queue = synthesized.template["Resources"][logical_id(synthesized, "AWS::SQS::Queue", fragment)]["Properties"]
        assert queue["SqsManagedSseEnabled"] is True and "KmsMasterKeyId" not in queue


def test_failed_deliveries_of_every_interruption_rule_alarm(synthesized):
    rules = sorted(key for key, rule in synthesized.resources("AWS::Events::Rule").items() if "EventPattern" in rule["Properties"])
    (alarm,) = [a["Properties"] for key, a in synthesized.resources("AWS::CloudWatch::Alarm").items() if "InterruptionDeliveryFailures" in key]
    watched = sorted(m["MetricStat"]["Metric"]["Dimensions"][0]["Value"]["Ref"] for m in alarm["Metrics"] if "MetricStat" in m)
    assert watched == rules
    assert {m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m} == {"FailedInvocations"}
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def this_accounts_alarms(condition: dict) -> bool:
    """aws:SourceAccount is this account and aws:SourceArn this account's alarms in this region."""
    arn = json.dumps(condition["ArnLike"]["aws:SourceArn"])
    return (
        condition["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
        and ":cloudwatch:" in arn
        and ":alarm:*" in arn
        and "AWS::AccountId" in arn
        and "AWS::Region" in arn
    )


def test_cloudwatch_may_use_the_key_for_this_accounts_alarms_only(synthesized):
    (key,) = synthesized.resources("AWS::KMS::Key").values()
    (statement_,) = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    assert this_accounts_alarms(statement_["Condition"])


# ---------------------------------------------------------------- queues


@pytest.mark.parametrize(
    ("queue_fragment", "consumer", "local_visibility", "receives", "encrypted_by_key"),
    [
        ("IngestionInterruption", "interruption", INTERRUPTION_VISIBILITY_SECONDS, MAX_RECEIVE_COUNT, False),
        ("WorkQueueWork", "termination", WORK_VISIBILITY_SECONDS, WORK_MAX_RECEIVE_COUNT, True),
    ],
)
def test_queues_redrive_after_their_receives_and_bring_back_a_dead_invocations_messages_promptly(
    synthesized,
    queue_fragment,
    consumer,
    local_visibility,
    receives,
    encrypted_by_key,
):
    """A message whose invocation died comes back once the consumer's timeout has surely
    passed, and no later: within the two minutes a spot warning gives (AWS's six-timeouts
    suggestion is declined on purpose: docs/infra.md). The local stack (simulator, soak,
    end-to-end tests) uses the same figures. The work queue's redrive is the one the
    termination handler's redelivery schedule counts on to outlive an outage."""
    from joiner.services.termination import WORK_MAX_RECEIVES

    assert (MAX_RECEIVE_COUNT, WORK_MAX_RECEIVE_COUNT) == (5, WORK_MAX_RECEIVES)
    queue = synthesized.template["Resources"][logical_id(synthesized, "AWS::SQS::Queue", f"{queue_fragment}Queue")]
    dlq_id = logical_id(synthesized, "AWS::SQS::Queue", f"{queue_fragment}DeadLetterQueue")
    properties = queue["Properties"]
    assert properties["RedrivePolicy"] == {"deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]}, "maxReceiveCount": receives}
    timeout = SPECS_BY_NAME[consumer].timeout_seconds
    assert properties["VisibilityTimeout"] == timeout + BATCHING_WINDOW_SECONDS + 5 == local_visibility
    assert properties["VisibilityTimeout"] <= 70
    function = synthesized.template["Resources"][function_id(synthesized, consumer)]
    assert function["Properties"]["Timeout"] == timeout
    assert properties["MessageRetentionPeriod"] >= 86400
    dlq = synthesized.template["Resources"][dlq_id]["Properties"]
    assert dlq["MessageRetentionPeriod"] == 14 * 86400
    if encrypted_by_key:
        key = {"Fn::GetAtt": [logical_id(synthesized, "AWS::KMS::Key", "Encryption"), "Arn"]}
        assert properties["KmsMasterKeyId"] == key and dlq["KmsMasterKeyId"] == key
    else:
        assert properties["SqsManagedSseEnabled"] is True and dlq["SqsManagedSseEnabled"] is True


def test_the_local_stack_routes_every_interruption_rules_events() -> None:
    """The test world's one rule (testworld.stack) admits every source and detail-type the
    deployment's rules route."""
    from testworld.stack import EVENT_RULE_PATTERN

    assert set(EVENT_RULE_PATTERN["source"]) == {rule.source for rule in INTERRUPTION_RULES}
    assert set(EVENT_RULE_PATTERN["detail-type"]) == {kind for rule in INTERRUPTION_RULES for kind in rule.detail_types}


@pytest.mark.parametrize(("consumer", "queue_fragment"), [("interruption", "IngestionInterruptionQueue"), ("termination", "WorkQueueWorkQueue")])
def test_sqs_event_sources_report_batch_item_failures(template, synthesized, consumer, queue_fragment):
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionName": {"Ref": function_id(synthesized, consumer)},
            "EventSourceArn": {"Fn::GetAtt": [logical_id(synthesized, "AWS::SQS::Queue", queue_fragment), "Arn"]},
            "BatchSize": 10,
            "MaximumBatchingWindowInSeconds": BATCHING_WINDOW_SECONDS,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "ScalingConfig": {"MaximumConcurrency": Match.any_value()},
        },
    )


# ---------------------------------------------------------------- functions and schedules


@pytest.mark.parametrize("spec", FUNCTION_SPECS, ids=lambda spec: spec.name)
def test_function_runtime_architecture_layer_environment(synthesized, spec):
    properties = synthesized.template["Resources"][function_id(synthesized, spec.name)]["Properties"]
    assert properties["Runtime"] == "python3.13"
    assert properties["Architectures"] == ["arm64"]
    assert properties["Handler"] == "handler.handler"
    assert (properties["Timeout"], properties["MemorySize"]) == (spec.timeout_seconds, spec.memory_mb)
    assert properties["Layers"] == [{"Ref": logical_id(synthesized, "AWS::Lambda::LayerVersion", "Layer")}]
    assert properties["TracingConfig"] == {"Mode": "Active"}
    assert properties.get("ReservedConcurrentExecutions") == spec.reserved_concurrency
    env = properties["Environment"]["Variables"]
    assert env["JOINER_CLUSTER_NAME"] == CLUSTER
    assert env["JOINER_STATE_TABLE"] == {"Ref": logical_id(synthesized, "AWS::DynamoDB::Table", "StateTable")}
    assert env["JOINER_IDEMPOTENCY_TABLE"] == {"Ref": logical_id(synthesized, "AWS::DynamoDB::Table", "IdempotencyTable")}
    assert env["JOINER_INTERRUPTION_QUEUE_URL"] == {"Ref": logical_id(synthesized, "AWS::SQS::Queue", "IngestionInterruptionQueue")}
    assert env["JOINER_WORK_QUEUE_URL"] == {"Ref": logical_id(synthesized, "AWS::SQS::Queue", "WorkQueueWorkQueue")}
    assert env["JOINER_SCANNER_MODE"] == "economy"  # one round per run: responsive mode's waiting is the watcher's
    assert env["JOINER_NODE_ROLE"] == {"Ref": logical_id(synthesized, "AWS::IAM::Role", "NodeRole")}
    assert "JOINER_KARPENTER_CRDS" not in env  # Karpenter's objects are read only when asked for
    assert (env["POWERTOOLS_SERVICE_NAME"], env["POWERTOOLS_METRICS_NAMESPACE"]) == ("joiner", "Joiner")
    log_group = synthesized.template["Resources"][properties["LoggingConfig"]["LogGroup"]["Ref"]]
    assert log_group["Properties"]["RetentionInDays"] == 30


def test_overlap_sensitive_functions_run_one_at_a_time(synthesized):
    reserved = {
        spec.name: synthesized.template["Resources"][function_id(synthesized, spec.name)]["Properties"].get("ReservedConcurrentExecutions")
        for spec in FUNCTION_SPECS
    }
    assert reserved == {"scanner": 1, "interruption": None, "termination": None, "disruption": 1, "gc": 1, "watcher": 1}


def test_the_watcher_wakes_only_the_scanner_and_exists_only_in_responsive_mode(synthesized, synthesized_private):
    watcher = synthesized.template["Resources"][function_id(synthesized, "watcher")]["Properties"]
    scanner = function_id(synthesized, "scanner")
    assert watcher["Environment"]["Variables"]["JOINER_PLANNER_FUNCTION"] == {"Ref": scanner}
    assert watcher["MemorySize"] == 128
    policy = statements(synthesized, "WatcherRoleDefaultPolicy")
    actions = {
        a: st["Resource"]
        for st in policy
        for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
        if not a.startswith(("logs:", "xray:", "kms:"))
    }
    assert actions == {
        "lambda:InvokeFunction": {"Fn::GetAtt": [scanner, "Arn"]},
        "dynamodb:GetItem": actions["dynamodb:GetItem"],
        "dynamodb:PutItem": actions["dynamodb:PutItem"],
    }
    role = logical_id(synthesized, "AWS::IAM::Role", "AccessWatcherRole")
    attached = [policy_id for policy_id, policy in synthesized.resources("AWS::IAM::Policy").items() if {"Ref": role} in policy["Properties"]["Roles"]]
    assert sorted(key.split("Access")[1].rstrip("0123456789ABCDEF") for key in attached if "Access" in key) == [
        "Discover",
        "WatcherRoleDefaultPolicy",
    ]  # no instance reads, no launch, nothing else
    assert [
        rule
        for rule in synthesized.resources("AWS::Events::Rule").values()
        if rule["Properties"].get("Targets", [{}])[0].get("Arn") == {"Fn::GetAtt": [function_id(synthesized, "watcher"), "Arn"]}
        and rule["Properties"].get("ScheduleExpression") == "rate(1 minute)"
    ]
    assert not [key for key in synthesized_private.resources("AWS::Lambda::Function") if "FunctionsWatcher" in key]


@pytest.mark.parametrize(
    ("name", "expression"), [("scanner", "rate(1 minute)"), ("disruption", "rate(1 minute)"), ("gc", "rate(5 minutes)"), ("watcher", "rate(1 minute)")]
)
def test_schedules_invoke_their_function(synthesized, name, expression):
    rules = [
        rule
        for rule in synthesized.resources("AWS::Events::Rule").values()
        if rule["Properties"].get("ScheduleExpression") == expression
        and rule["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": [function_id(synthesized, name), "Arn"]}
    ]
    assert len(rules) == 1
    invoke_config = [
        c
        for c in synthesized.resources("AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": function_id(synthesized, name)}
    ]
    assert invoke_config[0]["Properties"]["MaximumRetryAttempts"] == 0


# ---------------------------------------------------------------- IAM


def test_creation_requires_the_cluster_request_tag(synthesized):
    create = statement(synthesized, "AccessLaunch", "CreateOnlyTaggedForThisCluster")
    assert sorted(create["Action"]) == ["ec2:CreateFleet", "ec2:CreateLaunchTemplate", "ec2:RunInstances"]
    assert create["Condition"] == {"StringEquals": {"aws:RequestTag/joiner.dev/cluster": CLUSTER}}
    resources = json.dumps(create["Resource"])
    for resource_type in ("fleet", "instance", "volume", "network-interface", "launch-template"):
        assert f":{resource_type}/*" in resources
    # An instant fleet cannot tag its spot requests: they are authorised untagged, as in Karpenter's policy.
    assert ":spot-instances-request/*" not in resources
    assert ":spot-instances-request/*" in json.dumps(statement(synthesized, "AccessLaunch", "LaunchFromSharedInputs")["Resource"])
    tag_on_create = statement(synthesized, "AccessLaunch", "TagOnCreate")
    assert tag_on_create["Action"] == "ec2:CreateTags"
    assert tag_on_create["Condition"]["StringEquals"]["aws:RequestTag/joiner.dev/cluster"] == CLUSTER
    assert sorted(tag_on_create["Condition"]["StringEquals"]["ec2:CreateAction"]) == ["CreateFleet", "CreateLaunchTemplate", "RunInstances"]
    templates = statement(synthesized, "AccessLaunch", "LaunchWithThisClustersTemplates")
    assert templates["Condition"] == {"StringEquals": {"aws:ResourceTag/joiner.dev/cluster": CLUSTER}}


def test_destructive_actions_require_the_cluster_resource_tag(synthesized):
    resource_tag = {"aws:ResourceTag/joiner.dev/cluster": CLUSTER}
    terminate = statement(synthesized, "AccessTerminate", "TerminateThisClustersInstances")
    assert terminate["Action"] == "ec2:TerminateInstances" and terminate["Condition"]["StringEquals"] == resource_tag
    # CreateTags exists only as tag-on-create (ec2:CreateAction); no role re-tags existing resources.
    for policy in synthesized.resources("AWS::IAM::Policy").values():
        for s in policy["Properties"]["PolicyDocument"]["Statement"]:
            if "ec2:CreateTags" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]):
                assert s["Sid"] == "TagOnCreate" and "ec2:CreateAction" in s["Condition"]["StringEquals"]
    delete = statement(synthesized, "AccessCleanUp", "DeleteThisClustersLaunchTemplates")
    assert delete["Action"] == "ec2:DeleteLaunchTemplate" and delete["Condition"]["StringEquals"] == resource_tag
    # Nothing else anywhere grants these actions.
    for policy in synthesized.resources("AWS::IAM::Policy").values():
        for s in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
            if {"ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"} & set(actions):
                assert s["Condition"]["StringEquals"] == resource_tag


def test_pass_role_only_for_the_node_role_and_only_to_ec2(synthesized):
    pass_role = statement(synthesized, "AccessLaunch", "PassNodeRoleToEc2")
    assert pass_role["Action"] == "iam:PassRole"
    assert pass_role["Resource"] == {"Fn::GetAtt": [logical_id(synthesized, "AWS::IAM::Role", "NodeRole"), "Arn"]}
    # EC2's principal in the China regions is ec2.amazonaws.com.cn.
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}}


def test_describe_cluster_names_this_cluster_only(synthesized):
    describe = statement(synthesized, "AccessDiscover", "DescribeThisCluster")
    assert describe["Action"] == "eks:DescribeCluster"
    joined = describe["Resource"]["Fn::Join"][1]
    assert joined[-1] == f":cluster/{CLUSTER}" and ":eks:" in joined


def test_read_only_grants(synthesized):
    ssm = statement(synthesized, "AccessLaunch", "ReadEksOptimizedAmiParameters")
    assert ssm["Action"] == "ssm:GetParameter"
    (parameters,) = ssm["Resource"] if isinstance(ssm["Resource"], list) else [ssm["Resource"]]
    assert [part for part in parameters["Fn::Join"][1] if isinstance(part, str)][-1].endswith("::parameter/aws/service/eks/optimized-ami/*/amazon-linux-2023/*")
    in_region = {"StringEquals": {"aws:RequestedRegion": {"Ref": "AWS::Region"}}}
    describe = statement(synthesized, "AccessReadInstances", "DescribeInstancesInThisRegion")
    assert (describe["Action"], describe["Condition"]) == ("ec2:DescribeInstances", in_region)
    launch = statement(synthesized, "AccessLaunch", "DescribeLaunchInputsInThisRegion")
    assert sorted(launch["Action"]) == [
        "ec2:DescribeAvailabilityZones",
        "ec2:DescribeCapacityReservations",
        "ec2:DescribeImages",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeSpotPriceHistory",
        "ec2:DescribeSubnets",
    ]
    assert launch["Condition"] == in_region
    # No wildcard action anywhere (Describe* would let a role read every instance's user data),
    # and nothing unused: the price list only where the run-time catalog is built, no Bottlerocket parameters.
    every_action = [
        a
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
        for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
    ]
    assert not [a for a in every_action if a.startswith("ec2:") and "*" in a]
    assert statement(synthesized, "AccessLaunch", "ReadOnDemandPrices")["Action"] == "pricing:GetProducts"
    assert every_action.count("pricing:GetProducts") == 1 and "bottlerocket" not in json.dumps(synthesized.template)


def test_capability_policies_are_attached_per_function(synthesized):
    roles = {spec.name: logical_id(synthesized, "AWS::IAM::Role", f"Access{spec.name.capitalize()}Role") for spec in FUNCTION_SPECS}

    def holders(policy_fragment: str) -> set[str]:
        policy = synthesized.template["Resources"][logical_id(synthesized, "AWS::IAM::Policy", policy_fragment)]
        attached = {ref["Ref"] for ref in policy["Properties"]["Roles"]}
        return {name for name, role in roles.items() if role in attached}

    assert holders("AccessDiscover") == set(roles)
    assert holders("AccessReadInstances") == set(roles) - {"watcher"}
    assert holders("AccessLaunch") == {"scanner", "interruption", "disruption"}
    # the scanner terminates instances whose node never registered
    assert holders("AccessTerminate") == {"scanner", "interruption", "termination", "disruption", "gc"}
    assert holders("AccessCleanUp") == {"gc"}
    # Functions start only after their permissions exist.
    scanner = synthesized.template["Resources"][function_id(synthesized, "scanner")]
    assert logical_id(synthesized, "AWS::IAM::Policy", "AccessLaunch") in scanner["DependsOn"]


def test_data_grants_are_scoped_to_our_resources(synthesized):
    table = logical_id(synthesized, "AWS::DynamoDB::Table", "StateTable")
    for policy_id, policy in synthesized.resources("AWS::IAM::Policy").items():
        for s in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
            if any(a.startswith(("dynamodb:", "sqs:", "kms:", "logs:")) for a in actions):
                assert s["Resource"] != "*", f"{policy_id} grants {actions} on *"
    scanner = statements(synthesized, "ScannerRoleDefaultPolicy")
    assert any(s["Resource"] == [{"Fn::GetAtt": [table, "Arn"]}, {"Fn::Join": ["", [{"Fn::GetAtt": [table, "Arn"]}, "/index/*"]]}] for s in scanner)


def test_idempotency_table_and_work_queue_are_granted_only_to_their_users(synthesized):
    idempotency = logical_id(synthesized, "AWS::DynamoDB::Table", "IdempotencyTable")
    work_queue = logical_id(synthesized, "AWS::SQS::Queue", "WorkQueueWorkQueue")

    def granted(name: str, target: str, action_prefix: str) -> bool:
        return any(
            action_prefix in json.dumps(s["Action"]) and target in json.dumps(s["Resource"])
            for s in statements(synthesized, f"{name.capitalize()}RoleDefaultPolicy")
        )

    assert {spec.name for spec in FUNCTION_SPECS if granted(spec.name, idempotency, "dynamodb:")} == {"interruption"}
    assert {spec.name for spec in FUNCTION_SPECS if granted(spec.name, work_queue, "sqs:SendMessage")} == {"interruption", "termination", "disruption"}
    # Only the calls the adapters make: no batch, stream or table-description actions, nothing else on queues.
    granted_actions = {
        a
        for spec in FUNCTION_SPECS
        for st in statements(synthesized, f"{spec.name.capitalize()}RoleDefaultPolicy")
        for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
    }
    assert {a for a in granted_actions if a.startswith("dynamodb:")} == {
        "dynamodb:DeleteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:Scan",
        "dynamodb:UpdateItem",
    }
    # Functions that consume no queue (their event source mapping grants receive/delete) only send.
    for name in ("scanner", "disruption", "gc"):
        sqs_actions = {
            a
            for st in statements(synthesized, f"{name.capitalize()}RoleDefaultPolicy")
            for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
            if a.startswith("sqs:")
        }
        assert sqs_actions <= {"sqs:SendMessage"}, (name, sqs_actions)


def test_access_entries_map_every_function_role_to_the_controller_group(synthesized):
    entries = [e["Properties"] for e in synthesized.resources("AWS::EKS::AccessEntry").values()]
    standard = [e for e in entries if e["Type"] == "STANDARD"]
    assert len(standard) == 6
    role_ids = {logical_id(synthesized, "AWS::IAM::Role", f"Access{spec.name.capitalize()}Role") for spec in FUNCTION_SPECS}
    assert {e["PrincipalArn"]["Fn::GetAtt"][0] for e in standard} == role_ids
    watcher_role = logical_id(synthesized, "AWS::IAM::Role", "AccessWatcherRole")
    for entry in standard:
        group = "joiner:watcher" if entry["PrincipalArn"]["Fn::GetAtt"][0] == watcher_role else "joiner:controller"
        assert entry["ClusterName"] == CLUSTER and entry["KubernetesGroups"] == [group]
    (node,) = [e for e in entries if e["Type"] == "EC2_LINUX"]
    assert node["PrincipalArn"] == {"Fn::GetAtt": [logical_id(synthesized, "AWS::IAM::Role", "NodeRole"), "Arn"]}


def test_node_role_has_worker_policies_and_an_instance_profile_of_the_same_name(synthesized):
    role = synthesized.template["Resources"][logical_id(synthesized, "AWS::IAM::Role", "NodeRole")]["Properties"]
    # IAM names are account-wide: the region keeps one cluster name's stacks in two regions apart.
    role_name = {"Fn::Join": ["", [f"JoinerNodeRole-{CLUSTER}-", {"Ref": "AWS::Region"}]]}
    assert role["RoleName"] == role_name
    policies = json.dumps(role["ManagedPolicyArns"])
    for name in ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryPullOnly", "AmazonSSMManagedInstanceCore"):
        assert f"policy/{name}" in policies
    (profile,) = synthesized.resources("AWS::IAM::InstanceProfile").values()
    assert profile["Properties"]["InstanceProfileName"] == role_name


# ---------------------------------------------------------------- state


def test_state_table_keys_indexes_ttl_pitr_encryption(template, synthesized):
    key_arn = {"Fn::GetAtt": [logical_id(synthesized, "AWS::KMS::Key", "Encryption"), "Arn"]}
    template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            "BillingMode": "PAY_PER_REQUEST",
            "TimeToLiveSpecification": {"AttributeName": "expiresAt", "Enabled": True},
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": key_arn},
            "GlobalSecondaryIndexes": Match.array_equals(
                [
                    {"IndexName": "byInstance", "KeySchema": [{"AttributeName": "instanceId", "KeyType": "HASH"}], "Projection": {"ProjectionType": "ALL"}},
                    {
                        "IndexName": "byNodePool",
                        "KeySchema": [{"AttributeName": "nodePool", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                        "Projection": {"ProjectionType": "ALL"},
                    },
                    {
                        "IndexName": "byOpenClaim",
                        "KeySchema": [{"AttributeName": "openClaim", "KeyType": "HASH"}, {"AttributeName": "pk", "KeyType": "RANGE"}],
                        "Projection": {"ProjectionType": "ALL"},
                    },
                ]
            ),
        },
    )
    template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
            "BillingMode": "PAY_PER_REQUEST",
            "TimeToLiveSpecification": {"AttributeName": "expiration", "Enabled": True},
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": key_arn},
        },
    )
    for table in synthesized.resources("AWS::DynamoDB::Table").values():
        assert table["DeletionPolicy"] == "Retain"


# ---------------------------------------------------------------- monitoring


def custom_alarm(synthesized: Synthesized, metric_name: str) -> dict:
    (alarm,) = [
        a["Properties"]
        for a in synthesized.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("Namespace") == "Joiner" and a["Properties"].get("MetricName") == metric_name
    ]
    # Exactly the dimensions the functions emit (tests/unit/test_metric_dimensions.py), this cluster's.
    assert sorted(alarm["Dimensions"], key=lambda d: d["Name"]) == [{"Name": "cluster", "Value": "demo"}, {"Name": "service", "Value": "joiner"}]
    return alarm


def test_business_alarms(synthesized):
    age = custom_alarm(synthesized, "PendingPodAgeSeconds")
    assert (age["Statistic"], age["Threshold"], age["ComparisonOperator"]) == ("Maximum", 300, "GreaterThanThreshold")
    limit = custom_alarm(synthesized, "LimitReached")
    assert (limit["Statistic"], limit["Threshold"], limit["ComparisonOperator"]) == ("Sum", 0, "GreaterThanThreshold")
    errors = custom_alarm(synthesized, "CapacityErrors")
    assert (errors["Statistic"], errors["Threshold"], errors["Period"]) == ("Sum", 10, 300)
    scans = custom_alarm(synthesized, "ScanCompleted")
    assert scans["TreatMissingData"] == "breaching" and scans["ComparisonOperator"] == "LessThanThreshold"


def test_an_interruption_event_waiting_30_s_alarms(synthesized):
    queue = logical_id(synthesized, "AWS::SQS::Queue", "IngestionInterruptionQueue")
    (age,) = [
        a["Properties"]
        for a in synthesized.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "ApproximateAgeOfOldestMessage"
    ]
    assert age["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
    assert (age["Statistic"], age["Period"], age["Threshold"], age["ComparisonOperator"]) == ("Maximum", 60, 30, "GreaterThanThreshold")


def test_no_dashboard_unless_asked_for(synthesized):
    assert not synthesized.resources("AWS::CloudWatch::Dashboard")
    assert not [key for key in synthesized.template["Outputs"] if "Dashboard" in key]


def test_the_dashboard_is_named_and_in_the_outputs_when_asked_for(synthesized_private):
    synthesized = synthesized_private
    (dashboard,) = synthesized.resources("AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == "platform-private"
    outputs = {key.rstrip("0123456789ABCDEF"): value["Value"] for key, value in synthesized.template["Outputs"].items()}
    assert outputs["JoinerDashboardName"] == {"Ref": logical_id(synthesized, "AWS::CloudWatch::Dashboard", "Dashboard")}
    assert outputs["JoinerDashboardUrl"] == "https://console.aws.amazon.com/cloudwatch/home?region=eu-west-1#dashboards:name=platform-private"
    # The dashboard's sums over breakdowns read this cluster's metrics only.
    body = "".join(part for part in dashboard["Properties"]["DashboardBody"]["Fn::Join"][1] if isinstance(part, str))
    assert body.count("SEARCH(") >= 5 and body.count("SEARCH(") == body.count('cluster=\\"private-cluster\\"')


def test_dead_letter_alarms_for_both_queues(synthesized):
    dlqs = {logical_id(synthesized, "AWS::SQS::Queue", f"{fragment}DeadLetterQueue") for fragment in ("IngestionInterruption", "WorkQueueWork")}
    watched = set()
    for alarm in synthesized.resources("AWS::CloudWatch::Alarm").values():
        properties = alarm["Properties"]
        if properties.get("MetricName") == "ApproximateNumberOfMessagesVisible":
            assert (properties["Threshold"], properties["ComparisonOperator"]) == (0, "GreaterThanThreshold")
            watched.add(properties["Dimensions"][0]["Value"]["Fn::GetAtt"][0])
    assert watched == dlqs


@pytest.mark.parametrize("metric", ["Errors", "Throttles"])
def test_errors_alarm_per_function_and_throttles_for_the_queue_consumers(synthesized, metric):
    """Throttling of a one-at-a-time function is by design (a wake-up during a round waits for it)."""
    functions = {function_id(synthesized, spec.name) for spec in FUNCTION_SPECS if metric == "Errors" or spec.reserved_concurrency is None}
    assert len(functions) == (6 if metric == "Errors" else 2)
    alarmed = {
        a["Properties"]["Dimensions"][0]["Value"]["Ref"]
        for a in synthesized.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("Namespace") == "AWS/Lambda" and a["Properties"]["MetricName"] == metric
    }
    assert alarmed == functions


def test_every_alarm_notifies_the_encrypted_topic(synthesized):
    ((topic_id, topic),) = synthesized.resources("AWS::SNS::Topic").items()
    assert "KmsMasterKeyId" in topic["Properties"]
    (topic_policy,) = synthesized.resources("AWS::SNS::TopicPolicy").values()
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in topic_policy["Properties"]["PolicyDocument"]["Statement"]
    )
    # The topic policy replaces SNS's default one: it must let this account's alarms publish.
    (publish,) = [s for s in topic_policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    assert (publish["Principal"], publish["Action"], publish["Resource"]) == ({"Service": "cloudwatch.amazonaws.com"}, "sns:Publish", {"Ref": topic_id})
    assert this_accounts_alarms(publish["Condition"])
    for alarm in synthesized.resources("AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}]
        assert alarm["Properties"]["OKActions"] == [{"Ref": topic_id}]
    assert not synthesized.resources("AWS::SNS::Subscription")


def test_dashboard_shows_pending_pods_launches_interruptions_and_cost(synthesized_private):
    (dashboard,) = synthesized_private.resources("AWS::CloudWatch::Dashboard").values()
    # The body is a JSON string joined with tokens (ARNs, names): tokens become a placeholder.
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    body = json.loads("".join(part if isinstance(part, str) else "TOKEN" for part in parts))
    shown: dict[str, set[str]] = {}
    for widget in body["widgets"]:
        for line in widget.get("properties", {}).get("metrics", []):
            options = line[-1] if isinstance(line[-1], dict) else {}
            if "expression" in options:
                name = options["expression"].split('MetricName="')[1].split('"')[0]
            else:
                name = line[1]
            shown.setdefault(widget["properties"].get("title", ""), set()).add(name)
    assert {"PodsPending", "PendingPodAgeSeconds"} <= shown["Pending pods"]
    assert {"ClaimsLaunched", "NodesTerminated", "CapacityErrors", "LimitReached"} <= shown["Launches"]
    assert {"InterruptionActions", "NumberOfMessagesReceived"} <= shown["Interruptions"]
    assert shown["Cost per hour of managed nodes (USD)"] == {"ManagedCostPerHour"}
    assert shown["Disruption"] == {"DisruptionCommandsExecuted", "NodesDisrupted", "DisruptionCommandsDropped"}
    assert shown["Garbage collection and spot prices"] == {"GarbageCollected", "GarbageCollectionErrors", "SpotPricesUnavailable"}


# ---------------------------------------------------------------- private-cluster variant


def test_the_functions_log_level_is_configurable(synthesized, synthesized_private):
    for synth, level in ((synthesized, "INFO"), (synthesized_private, "DEBUG")):
        for spec in specs_for_mode("responsive" if synth is synthesized else "economy"):
            properties = synth.template["Resources"][function_id(synth, spec.name)]["Properties"]
            assert properties["Environment"]["Variables"]["POWERTOOLS_LOG_LEVEL"] == level
            # Lambda filters application logs at its own level before powertools sees them.
            assert properties["LoggingConfig"]["ApplicationLogLevel"] == level


def test_alarm_thresholds_and_the_dashboard_name_are_configurable(synthesized_private):
    thresholds = {
        a["Properties"]["MetricName"]: a["Properties"]["Threshold"]
        for a in synthesized_private.resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") in ("PendingPodAgeSeconds", "CapacityErrors", "ApproximateAgeOfOldestMessage")
    }
    assert thresholds == {"PendingPodAgeSeconds": 900, "CapacityErrors": 25, "ApproximateAgeOfOldestMessage": 45}
    (dashboard,) = synthesized_private.resources("AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == "platform-private"
    for alarm in synthesized_private.resources("AWS::CloudWatch::Alarm").values():
        if alarm["Properties"].get("Namespace") == "Joiner":
            assert {"Name": "cluster", "Value": "private-cluster"} in alarm["Properties"]["Dimensions"]


def test_private_variant_runs_functions_in_the_given_subnets(synthesized_private):
    for spec in specs_for_mode("economy"):
        properties = synthesized_private.template["Resources"][function_id(synthesized_private, spec.name)]["Properties"]
        assert properties["VpcConfig"]["SubnetIds"] == ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
        assert properties["Environment"]["Variables"]["JOINER_SCANNER_MODE"] == "economy"
        assert properties["Environment"]["Variables"]["JOINER_NODE_ROLE"] == "MyNodeRole"
        assert properties["Environment"]["Variables"]["JOINER_KARPENTER_CRDS"] == "true"  # -c readKarpenterCrds=true
    (group,) = synthesized_private.resources("AWS::EC2::SecurityGroup").values()
    assert group["Properties"]["SecurityGroupEgress"] == [
        {"CidrIp": "0.0.0.0/0", "Description": "EKS API server and AWS service endpoints", "FromPort": 443, "IpProtocol": "tcp", "ToPort": 443}
    ]
    for role_id, role in synthesized_private.resources("AWS::IAM::Role").items():
        assert "AWSLambdaVPCAccessExecutionRole" in json.dumps(role["Properties"].get("ManagedPolicyArns")), role_id


def test_private_variant_uses_the_existing_role_topic_and_no_access_entries(synthesized_private):
    assert not synthesized_private.resources("AWS::EKS::AccessEntry")
    assert not synthesized_private.resources("AWS::IAM::InstanceProfile")
    assert not synthesized_private.resources("AWS::SNS::Topic")
    pass_role = statement(synthesized_private, "AccessLaunch", "PassNodeRoleToEc2")
    assert pass_role["Resource"] == "arn:aws:iam::123456789012:role/eks/MyNodeRole"
    for alarm in synthesized_private.resources("AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmActions"] == ["arn:aws:sns:eu-west-1:123456789012:ops-alarms"]
    log_groups = synthesized_private.resources("AWS::Logs::LogGroup").values()
    assert {g["Properties"]["RetentionInDays"] for g in log_groups} == {14}


# ---------------------------------------------------------------- the run-time catalog's calls

#: What joiner.services.catalog calls to build a region's catalog (adapters/ec2.py, adapters/pricing.py).
CATALOG_ACTIONS = ("ec2:DescribeInstanceTypes", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeSpotPriceHistory", "pricing:GetProducts")


def allowed_actions(synthesized: Synthesized, role_fragment: str) -> list[str]:
    role = logical_id(synthesized, "AWS::IAM::Role", role_fragment)
    actions: list[str] = []
    for policy in synthesized.resources("AWS::IAM::Policy").values():
        if {"Ref": role} not in policy["Properties"].get("Roles", []):
            continue
        for found in policy["Properties"]["PolicyDocument"]["Statement"]:
            if found["Effect"] == "Allow":
                actions.extend([found["Action"]] if isinstance(found["Action"], str) else found["Action"])
    return actions


@pytest.mark.parametrize("function", ["scanner", "interruption", "disruption"])
def test_functions_that_plan_launches_may_build_the_catalog_of_their_region(synthesized: Synthesized, function: str) -> None:
    import fnmatch

    actions = allowed_actions(synthesized, f"{function.capitalize()}Role")
    for needed in CATALOG_ACTIONS:
        assert any(fnmatch.fnmatchcase(needed, granted) for granted in actions), f"{function} may not call {needed}"


def test_the_cost_benchmark_reads_what_the_template_bills_for(synthesized: Synthesized) -> None:
    """bench.cost_of_running prices the synthesized template: every function's memory, the
    schedules' monthly runs, alarms, dashboards, keys, tables, queues, event source mappings."""
    from bench.cost_of_running import MONTH_MINUTES, inventory

    resources = synthesized.template["Resources"]
    counted = inventory(synthesized.template)
    assert set(counted.memory_mb) == {"scanner", "interruption", "termination", "disruption", "gc", "watcher"}
    assert counted.memory_mb["watcher"] == 128
    assert counted.runs_per_month == {
        "scanner": MONTH_MINUTES,
        "disruption": MONTH_MINUTES,
        "gc": MONTH_MINUTES // 5,
        "interruption": 0,
        "termination": 0,
        "watcher": MONTH_MINUTES,
    }
    kinds = [r["Type"] for r in resources.values()]
    assert counted.alarms == kinds.count("AWS::CloudWatch::Alarm") > 0
    assert (counted.dashboards, counted.kms_keys, counted.tables) == (
        kinds.count("AWS::CloudWatch::Dashboard"),
        kinds.count("AWS::KMS::Key"),
        kinds.count("AWS::DynamoDB::Table"),
    )
    assert counted.sqs_consumers == 2 and counted.queues == kinds.count("AWS::SQS::Queue")
